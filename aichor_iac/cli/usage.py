"""Each command's examples, shown under its `--help` (and in docs/cli.md)."""

EXAMPLES = {
    "validate": """
  aichor-iac validate experiment.yaml
  aichor-iac validate --stack-config stacks/Pulumi.dev.yaml   # the stack's aichor:manifest
  cat experiment.yaml | aichor-iac validate -
  aichor-iac validate experiment.yaml --output json | jq '.problems[]'""",
    "entrypoints": """
  aichor-iac entrypoints jobset.yaml            # the lines to add to the stack config
  aichor-iac entrypoints --stack-config stacks/Pulumi.dev.yaml --platform linux/arm64
  aichor-iac entrypoints jobset.yaml --output json | jq -r '.entrypoints[]'""",
    "render": """
  aichor-iac render experiment.yaml | kubectl apply --dry-run=server -f -
  aichor-iac render experiment.yaml -o out/        # one file per object, stale ones removed
  aichor-iac render experiment.yaml --output json | jq -r '.items[].metadata.name'""",
    "preview": """
  aichor-iac preview experiment.yaml --stack-config stacks/Pulumi.dev.yaml
  aichor-iac preview new.yaml --diff old.yaml      # what pulumi up would change, field by field
  aichor-iac render experiment.yaml -o out/ && aichor-iac preview experiment.yaml --diff out/""",
    "run": """
  aichor-iac run --local experiment.yaml
  aichor-iac run --local experiment.yaml --replicas 1 --timeout 600   # a smoke test
  aichor-iac run --local sweep.yaml --replicas 1   # a Katib sweep's trials, then its table
  aichor-iac run --local experiment.yaml --output json | jq -r 'select(.pod) | .line'""",
    "status": """
  aichor-iac status --stack-config stacks/Pulumi.dev.yaml      # the stack's cluster
  aichor-iac status --local experiment.yaml --watch            # a run --local, elsewhere
  aichor-iac status --local sweep.yaml --plot sweep.png        # a sweep's objective, drawn
  aichor-iac status --stack-config stacks/Pulumi.dev.yaml --output json | jq .gpus""",
    "logs": """
  aichor-iac logs --stack-config stacks/Pulumi.dev.yaml -f
  aichor-iac logs --local experiment.yaml | grep exp-worker-1""",
    "events": """
  aichor-iac events --stack-config stacks/Pulumi.dev.yaml
  aichor-iac events --local experiment.yaml --output json | jq -r '.[].reason'""",
    "dashboard": """
  aichor-iac dashboard --local sweep.yaml                  # a run --local, in a browser
  aichor-iac dashboard --stack-config stacks/Pulumi.dev.yaml --port 8200
  aichor-iac dashboard experiments/ --host 0.0.0.0         # from elsewhere, with its token""",
    "check": """
  aichor-iac check --stack-config stacks/Pulumi.dev.yaml       # before the first pulumi up
  aichor-iac check experiment.yaml --context team-a --namespace team-a
  aichor-iac check --stack-config stacks/Pulumi.dev.yaml --output json | jq '.checks[]'""",
    "up": """
  aichor-iac up --stack-config stacks/Pulumi.sweep.yaml --until-done   # a sweep that learns
  aichor-iac up --stack-config stacks/Pulumi.dev.yaml                  # one pulumi up""",
    "convert": """
  aichor-iac convert pytorchjob.yaml > experiment.yaml
  aichor-iac convert rayjob.yaml --output json | jq '.lost'""",
    "history": """
  aichor-iac history                            # every kept run, newest first
  aichor-iac history lr-momentum                # the newest run of a sweep, its trials
  aichor-iac history lr-momentum --logs         # its pods' lines, as they were printed
  aichor-iac history --stack-config Pulumi.dev.yaml  # and the runs in its aichor:history
  aichor-iac history --output json | jq -r '.[] | [.name, .state] | @tsv'""",
    "schema": """
  aichor-iac schema > aichor-manifest.schema.json""",
    "examples": """
  aichor-iac examples                         # the examples, one line each
  aichor-iac examples pytorch -o my-exp/      # pytorch.yaml and the train.py it runs
  aichor-iac examples pytorch | aichor-iac preview -""",
}
