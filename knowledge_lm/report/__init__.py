"""From the results store to the leaderboards: gold recomputation, bootstrap comparisons, figures, pages."""
