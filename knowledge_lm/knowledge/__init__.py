"""Knowledge sources and features the methods share, computed once on the CPU: among them the knowledge
graph and its distance queries (``kg``), TransE entity embeddings (``kg_embeddings``) and entity-link
noise for robustness studies (``noise``)."""
