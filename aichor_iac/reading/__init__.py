"""Below the doors: reading an input's text into YAML documents with lines (`text`), pydantic
errors as problems (`errors`), and the pod-template checks the custom-resource doors share
(`podtemplate`)."""
