"""What a change would do, before it is made: the preview, as a terminal's tree or a pull
request's comment, the changes between two renders, and deterministic YAML."""
