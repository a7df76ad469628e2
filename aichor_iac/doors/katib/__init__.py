"""Katib's Experiment: a sweep's trials."""
