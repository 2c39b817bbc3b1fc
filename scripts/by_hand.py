"""The baseline the adapter benchmarks (bench_trainer.py, bench_adapters.py)
hold a generation's cost to: the same arrays as one generation by hand,
`wtxt.save_file(..., prev=)`, then `git add` and `git commit` through the
pre-commit hook `wtxt git install` sets (it verifies and packs), in a
repository of its own."""
import os
import resource
import shutil
import subprocess

import wtxt


def cpu_all():
    """CPU seconds of this process and its children so far."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def by_hand(repo, states):
    """CPU seconds of each state (a dict of arrays) in turn as one generation by hand, in a new repository `repo`."""
    subprocess.run(["git", "init", "-q", repo], check=True)
    subprocess.run([shutil.which("wtxt"), "git", "install"], cwd=repo, check=True, capture_output=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@e", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@e"}
    path = os.path.join(repo, "state.wtxt")
    costs = []
    for i, arrays in enumerate(states):
        c = cpu_all()
        wtxt.save_file(arrays, path, prev=path if i else None)
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
        subprocess.run(["git", "commit", "-qm", f"g{i}"], cwd=repo, check=True, env=env)
        costs.append(cpu_all() - c)
    return costs
