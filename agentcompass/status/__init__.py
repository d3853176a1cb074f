"""What is done, what failed, and what would rerun and why: what ``agentcompass status`` and
``agentcompass retry`` compute.

``counts`` reads the result files (the attempts by status, the failed ones, the files a retry
forces); ``prediction`` compares the params the rules would compute now with those Snakemake
recorded, scope by scope, so the answer is the one the next run acts on; ``text`` is what
``status`` prints. This package exports what the rest of the code uses.
"""

from agentcompass.status.counts import FailedAttempt, failed_attempt_targets, read_results, status_counts
from agentcompass.status.prediction import PendingJob, RequestStatus, predict
from agentcompass.status.text import SHOWN_ERRORS, render

__all__ = ["SHOWN_ERRORS", "FailedAttempt", "PendingJob", "RequestStatus", "failed_attempt_targets", "predict",
           "read_results", "render", "status_counts"]
