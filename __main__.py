"""The Pulumi program: stack config -> experiment component -> stack outputs.

pulumi stack select pytorch && pulumi up
"""

import pulumi

from aichor_iac import components, manifest, settings

config = pulumi.Config("aichor")
try:
    stack_settings = settings.from_pulumi_config(config)
    experiment_manifest = manifest.load(config.require("manifest"))
    name = stack_settings.experiment_name or experiment_manifest.name or pulumi.get_stack()
    experiment = components.experiment(name, experiment_manifest, stack_settings)
except manifest.ManifestError as error:
    raise pulumi.RunError(str(error)) from None  # one line per problem, no traceback

if experiment.kept and not pulumi.Config("kubernetes").get_bool("upsertExistingObjects"):
    # pulumi-kubernetes 4.29+ refuses to create what exists: a later `pulumi up` of this stack
    # would fail on what `pulumi destroy` leaves, instead of finding it again.
    pulumi.log.warn(
        f"`pulumi destroy` keeps {', '.join(experiment.kept)}; to find it again in a later "
        "`pulumi up` of this stack, run `pulumi config set kubernetes:upsertExistingObjects "
        "true` (or set aichor:deleteSharedVolume true to delete it)"
    )

for key, value in experiment.outputs.items():
    pulumi.export(key, value)
