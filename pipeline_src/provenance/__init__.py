"""Which models answered: the manifest the build writes beside each model it builds, and the identity
of the served models that every answer carries."""
