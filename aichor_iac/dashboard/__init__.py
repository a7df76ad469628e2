"""`aichor-iac dashboard`: a local web page of the experiments `status` reads (issue 55).

`watch` reads the cluster (or a local run) in the background, as `status --watch` does, and
follows the logs a page asks for; `views` turns what it read into the pages' rows; `app` serves
them read-only (Starlette, Jinja2 with autoescaping, uvicorn), with the page's scripts and
Chart.js served from the package. Its dependencies are the `aichor-iac[dashboard]` extra.
"""
