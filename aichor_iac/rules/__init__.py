"""The rules objects must keep that the OpenAPI schema omits, and where a rule's path leads."""
