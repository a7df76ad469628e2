"""The Pulumi program: stack config -> a component per experiment -> stack outputs.

pulumi stack select pytorch && pulumi up
"""

import pulumi

from aichor_iac import components, doors, settings
from aichor_iac.problems import ManifestError

config = pulumi.Config("aichor")
try:
    stack_settings = settings.from_pulumi_config(config)
    manifests = doors.load_all(config.require("manifest"))  # (a file or a directory)
    experiments = components.export_all(manifests, stack_settings, pulumi.get_stack())
except ManifestError as error:
    raise pulumi.RunError(str(error)) from None  # one line per problem, no traceback
