"""Job → Pods run to completion; counts successes and failures, honours backoffLimit and deadlines.

Each Job pod carries the `batch.kubernetes.io/job-tracking` finalizer, as on a real cluster, so a pod is
counted before it can disappear.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any

from .apiserver import PODS
from .controller import Controller, ObjectRef
from .errors import ApiError
from .events import record_event
from .meta import now, parse_time, set_condition
from .store import Event
from .workloads import delete_pod, is_ready, new_pod, owned, pod_type

JOBS = ("batch", "jobs")
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
# Delay before a failed pod is replaced: shorter than a real cluster's 10 s doubling up to 6 min.
RETRY_BACKOFF_BASE = 0.5
RETRY_BACKOFF_MAX = 10.0


def job_finished(job: dict[str, Any]) -> str | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return str(condition["type"])
    return None


class JobController(Controller):
    kind = JOBS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._last_failure: dict[str, float] = {}
        # Pods that keep the tracking finalizer though their Job is gone.
        self._orphans: set[tuple[str, str]] = set()

    def refs_for(self, event: Event) -> Iterable[ObjectRef]:
        yield from super().refs_for(event)
        meta = event.obj["metadata"]
        if (
            event.key == PODS
            and event.type != "DELETED"
            and TRACKING_FINALIZER in (meta.get("finalizers") or [])
        ):
            owners = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
            if not owners or not any(self.api.uid_exists(str(r.get("uid"))) for r in owners):
                self._orphans.add((meta["namespace"], meta["name"]))
                self.enqueue(("", ""))

    def before_batch(self) -> None:
        orphans, self._orphans = self._orphans, set()
        for namespace, name in orphans:
            pod = self.api.store.get(PODS, namespace, name)
            if pod is not None and not self.api.pod_is_running(pod):
                self.api.remove_finalizer(PODS, pod, TRACKING_FINALIZER)
            elif pod is not None:
                # Still stopping: look again when its status changes.
                self._orphans.add((namespace, name))

    def reconcile(self, namespace: str, name: str) -> float | None:
        if not name:
            return None
        job = self.api.store.get(JOBS, namespace, name)
        if job is None:
            return None
        spec = job.get("spec") or {}
        status = dict(job.get("status") or {})
        uid = job["metadata"]["uid"]
        pods = owned(self.api, job, PODS)
        # Count pods that ended and release them (once the Job has finished, they no longer count).
        succeeded, failed = int(status.get("succeeded", 0)), int(status.get("failed", 0))
        counting = job_finished(job) is None
        for pod in pods:
            phase = (pod.get("status") or {}).get("phase")
            terminal = phase in ("Succeeded", "Failed")
            finalizers = pod["metadata"].get("finalizers") or []
            if TRACKING_FINALIZER not in finalizers:
                continue
            if terminal or (pod["metadata"].get("deletionTimestamp") and not self.api.pod_is_running(pod)):
                if counting and phase == "Succeeded":
                    succeeded += 1
                elif counting:
                    failed += 1
                    self._last_failure[uid] = time.time()
                self.api.remove_finalizer(PODS, pod, TRACKING_FINALIZER)
        pods = owned(self.api, job, PODS)
        active = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]
        terminating = [
            p
            for p in pods
            if p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        if job["metadata"].get("deletionTimestamp"):
            return None
        finished = job_finished(job)
        conditions = list(status.get("conditions") or [])
        requeue: float | None = None
        if finished is None:
            if spec.get("suspend"):
                for pod in active:
                    delete_pod(self.api, pod)
                conditions = set_condition(
                    conditions, "Suspended", "True", "JobSuspended", "Job suspended", probe_time=True
                )
                status["conditions"] = conditions
                status.pop("startTime", None)
                active = []
            else:
                if any(c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions):
                    conditions = set_condition(
                        conditions, "Suspended", "False", "JobResumed", "Job resumed", probe_time=True
                    )
                status.setdefault("startTime", now())
                completions = spec.get("completions")
                parallelism = int(spec.get("parallelism", 1))
                backoff_limit = int(spec.get("backoffLimit", 6))
                restarts = sum(
                    s.get("restartCount", 0)
                    for p in active
                    for s in (p.get("status") or {}).get("containerStatuses") or []
                )
                started = parse_time(status.get("startTime")) or time.time()
                deadline = spec.get("activeDeadlineSeconds")
                failure: tuple[str, str] | None = None
                if failed + restarts > backoff_limit:
                    failure = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
                elif deadline is not None and time.time() - started >= int(deadline):
                    failure = ("DeadlineExceeded", "Job was active longer than specified deadline")
                done = (
                    succeeded >= int(completions) if completions is not None else succeeded > 0 and not active
                )
                if failure is not None:
                    for pod in active:
                        delete_pod(self.api, pod)
                    conditions = set_condition(
                        conditions, "FailureTarget", "True", failure[0], failure[1], probe_time=True
                    )
                    conditions = set_condition(
                        conditions, "Failed", "True", failure[0], failure[1], probe_time=True
                    )
                    record_event(self.api, job, "Warning", failure[0], failure[1], "job-controller")
                    active = []
                elif done:
                    for pod in active:
                        delete_pod(self.api, pod)
                    conditions = set_condition(
                        conditions,
                        "SuccessCriteriaMet",
                        "True",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                        probe_time=True,
                    )
                    conditions = set_condition(
                        conditions,
                        "Complete",
                        "True",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                        probe_time=True,
                    )
                    status["completionTime"] = now()
                    record_event(self.api, job, "Normal", "Completed", "Job completed", "job-controller")
                    active = []
                else:
                    wanted = (
                        parallelism if completions is None else min(parallelism, int(completions) - succeeded)
                    )
                    missing = wanted - len(active)
                    if missing > 0:
                        wait = self._retry_delay(uid, failed)
                        if wait > 0:
                            requeue = wait
                        else:
                            for _ in range(missing):
                                created = self._create_pod(job)
                                if created is None:
                                    requeue = 5.0
                                    break
                                active.append(created)
                    if deadline is not None:
                        left = int(deadline) - (time.time() - started)
                        requeue = min(requeue or left, left) if left > 0 else 0.1
        status["conditions"] = conditions
        if not conditions:
            status.pop("conditions")
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if is_ready(p))
        status["terminating"] = len(terminating)
        status["succeeded"] = succeeded
        status["failed"] = failed
        status["uncountedTerminatedPods"] = {}
        for key in ("active", "succeeded", "failed", "terminating"):
            if not status[key]:
                status.pop(key)
        self.api.write_status(JOBS, job, status)
        finished = job_finished(self.api.store.get(JOBS, namespace, name) or job)
        if finished is not None:
            for pod in active:
                delete_pod(self.api, pod)
            return self._expire(job, requeue)
        return requeue

    def _retry_delay(self, uid: str, failed: int) -> float:
        if failed == 0 or uid not in self._last_failure:
            return 0.0
        delay: float = min(RETRY_BACKOFF_MAX, RETRY_BACKOFF_BASE * 2.0 ** (failed - 1))
        return max(0.0, self._last_failure[uid] + delay - time.time())

    def _expire(self, job: dict[str, Any], requeue: float | None) -> float | None:
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return requeue
        current = self.api.store.get(JOBS, job["metadata"]["namespace"], job["metadata"]["name"]) or job
        finished_at = None
        for condition in (current.get("status") or {}).get("conditions") or []:
            if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
                finished_at = parse_time(condition.get("lastTransitionTime"))
        left = (finished_at or time.time()) + int(ttl) - time.time()
        if left > 0:
            return left
        with contextlib.suppress(ApiError):
            self.api.delete(
                self.api.type_for(JOBS),
                job["metadata"]["namespace"],
                job["metadata"]["name"],
                {"propagationPolicy": "Background"},
            )
        return None

    def _create_pod(self, job: dict[str, Any]) -> dict[str, Any] | None:
        spec = job.get("spec") or {}
        pod = new_pod(job, spec.get("template") or {}, {}, generate_name=f"{job['metadata']['name']}-")
        pod["metadata"]["finalizers"] = [*pod["metadata"].get("finalizers", []), TRACKING_FINALIZER]
        try:
            created = self.api.create(pod_type(self.api), job["metadata"]["namespace"], pod)
        except ApiError as exc:
            record_event(
                self.api, job, "Warning", "FailedCreate", f"Error creating: {exc.message}", "job-controller"
            )
            return None
        record_event(
            self.api,
            job,
            "Normal",
            "SuccessfulCreate",
            f"Created pod: {created['metadata']['name']}",
            "job-controller",
        )
        return created
