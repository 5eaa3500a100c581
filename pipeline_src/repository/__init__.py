"""Tools for the model repository itself: ``validate`` checks it before a server starts; ``scaffold``
adds a new Python step to it."""
