"""The kuberay submitter (`frameworks/ray.py`): submit once (a retried pod follows the job it
submitted before), follow the logs, exit with the Ray job's outcome (`ray job logs --follow`
alone exits 0). The dashboard answers before the head's job agent has registered, and then
refuses a submission for 10 s with "No available agent to submit job, please try again later."
(ray/dashboard/modules/job/job_head.py): such a refusal is retried until the deadline. argv:
dashboard URL, submission id, entrypoint, deadline in seconds, and the submission's options as
JSON (`submit_job`'s runtime_env, metadata, entrypoint_num_cpus, ...)."""

import json
import subprocess
import sys
import time

from ray.job_submission import JobStatus, JobSubmissionClient

url, job, entrypoint = sys.argv[1:4]
deadline, options = time.time() + int(sys.argv[4]), json.loads(sys.argv[5])


def retried(what, call, transient=lambda error: True):
    while True:
        try:
            return call()
        except Exception as error:
            if not transient(error):
                sys.exit(f"aichor: {what} failed at {url}: {error}")
            if time.time() >= deadline:
                sys.exit(f"aichor: gave up {what} at {url}: {error}")
            print(f"aichor: {what} at {url}: {error}", flush=True)
            time.sleep(2)


client = retried("waiting for the Ray dashboard", lambda: JobSubmissionClient(url))
try:
    print(f"aichor: Ray job {job} was submitted before: {client.get_job_status(job)}", flush=True)
except Exception:
    retried(
        f"submitting Ray job {job}",
        lambda: client.submit_job(entrypoint=entrypoint, submission_id=job, **options),
        lambda error: "try again later" in str(error),
    )
    print(f"aichor: submitted Ray job {job}", flush=True)
subprocess.call(["ray", "job", "logs", "--address", url, "--follow", job])
done = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
while (status := client.get_job_status(job)) not in done:
    time.sleep(2)
print(f"aichor: Ray job {job} {status.value}", flush=True)
sys.exit(0 if status == JobStatus.SUCCEEDED else 1)
