"""The Pulumi program: stack config -> experiment component -> stack outputs.

pulumi stack select pytorch && pulumi up
"""

import pulumi

from aichor_iac import components, doors, settings
from aichor_iac.problems import ManifestError

config = pulumi.Config("aichor")
try:
    stack_settings = settings.from_pulumi_config(config)
    experiment_manifest = doors.load(config.require("manifest"))
    name = stack_settings.experiment_name or experiment_manifest.name_in(pulumi.get_stack())
    experiment = components.export(name, experiment_manifest, stack_settings)
except ManifestError as error:
    raise pulumi.RunError(str(error)) from None  # one line per problem, no traceback
