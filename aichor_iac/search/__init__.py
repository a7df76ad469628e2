"""Searches that learn from the trials that have ended (issue 54): the next trial's values as
a pure function of the search, its seed and its history (`learning.suggest`); early stopping
by Katib's median rule (`stopping`)."""
