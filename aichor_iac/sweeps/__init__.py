"""A sweep's results and their picture."""
