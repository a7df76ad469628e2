"""The Pulumi program: stack config -> a component per experiment -> stack outputs.

pulumi stack select pytorch && pulumi up
"""

import functools

import pulumi

from aichor_iac import components, doors, settings
from aichor_iac.observe import trials
from aichor_iac.problems import ManifestError

config = pulumi.Config("aichor")
try:
    stack_settings = settings.from_pulumi_config(config)
    path = config.require("manifest")
    manifests = doors.load_all(path)  # (a file or a directory)
    if any(m.trial is not None and m.trial.learns for m in manifests):  # (each `up`: the
        kubernetes = pulumi.Config("kubernetes")  # trials the results so far allow)
        manifests = trials.from_cluster(
            functools.partial(doors.load_all, path),
            stack_settings,
            pulumi.get_stack(),
            kubernetes.get("kubeconfig"),
            kubernetes.get("context"),
        )
    experiments = components.export_all(manifests, stack_settings, pulumi.get_stack())
except ManifestError as error:
    raise pulumi.RunError(str(error)) from None  # one line per problem, no traceback
