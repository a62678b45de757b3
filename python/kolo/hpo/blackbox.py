"""One black-box trial of kolo-hpo: a kolorun job of k ranks and its FoM lines.

The script knows nothing of kolo.hpo: it prints ``FoM: <value>`` lines
(the Cray PE ML plugin's convention). kolorun prefixes rank r's lines with
``[r]``; only rank 0's count (a one-rank job's too). Each one is handed to
``on_fom(value, index)``; when that returns True (the pruner says stop)
the job is ended (SIGTERM to kolorun, which ends its ranks) and the trial
is pruned. The last FoM is the objective.

``run_job`` returns a ``JobResult``: the exit status, the FoMs, whether it
was pruned, and the last lines of output (for a failure's message). The
whole output goes to ``log_path``.
"""

import collections
import math
import re
import signal
import subprocess

FOM = re.compile(r"^(?:\[(\d+)\] )?FoM:\s*(\S+)\s*$")

JobResult = collections.namedtuple("JobResult", "returncode foms pruned tail")


def parse_fom(line):
    """(value) of a rank-0 (or unprefixed) ``FoM:`` line, else None;
    ValueError for a FoM line whose value is not a number."""
    m = FOM.match(line.rstrip("\n"))
    if not m or (m.group(1) not in (None, "0")):
        return None
    try:
        return float(m.group(2))
    except ValueError:
        raise ValueError("bad FoM line %r: %r is not a number" % (line.strip(), m.group(2)))


def run_job(kolorun, ranks, command, log_path, on_fom, env=None):
    """Runs ``kolorun -np ranks command...``; see the module docstring."""
    args = [kolorun, "-np", str(ranks)] + list(command)
    foms, tail, pruned = [], collections.deque(maxlen=8), False
    with open(log_path, "w") as log:
        log.write("$ %s\n" % " ".join(args))
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, start_new_session=True)
        for line in proc.stdout:
            log.write(line)
            tail.append(line.rstrip("\n"))
            try:
                value = parse_fom(line)
            except ValueError as e:
                tail.append(str(e))
                value = math.nan
            if value is None or pruned:
                continue
            foms.append(value)
            if on_fom(value, len(foms) - 1):
                pruned = True
                proc.send_signal(signal.SIGTERM)
        returncode = proc.wait()
    return JobResult(returncode, foms, pruned, list(tail))


def outcome(result):
    """The trial's outcome for owner.StudyOwner: complete, pruned or fail."""
    if result.pruned:
        return ("pruned",)
    if result.returncode != 0:
        return ("fail", "the job exited with code %d; last lines: %s"
                % (result.returncode, " | ".join(result.tail[-3:])))
    if not result.foms:
        return ("fail", "the job printed no 'FoM: <value>' line on rank 0")
    return ("complete", result.foms[-1])
