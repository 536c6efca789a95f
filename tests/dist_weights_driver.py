"""Launched by tests/test_distributed.py under torchrun: train a few steps through the real
trainer, then every rank reports a digest of its agent's *whole* weights (ZeRO-3 gathers
them), so the test can check that the ranks of one agent group hold identical weights.

    torchrun --nproc_per_node 4 tests/dist_weights_driver.py OUT.json key=value ...
"""

import hashlib
import json
import sys
from pathlib import Path

# run as a script, its folder (tests/, which holds a tests/processors/ folder) would come
# first on sys.path and shadow the real `processors` package: put the repository first
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from vlcohort.config import load_config  # noqa: E402 - sys.path is set first
from vlcohort.recipes import cohort as T  # noqa: E402 - sys.path is set first


def main() -> None:
    out, overrides = sys.argv[1], sys.argv[2:]
    run = T.setup(load_config(None, overrides))
    T.train(run)
    mine = {}
    for agent in run.agents:
        with agent.generation_context():  # collective within the group under ZeRO-3
            h = hashlib.sha1()
            for name, p in agent.model.named_parameters():
                h.update(name.encode())
                h.update(p.detach().float().contiguous().numpy().tobytes())
            mine[agent.name] = h.hexdigest()
    everyone = run.layout.gather({"rank": run.layout.rank, "digests": mine}, "digests")
    if run.layout.is_logger:
        with open(out, "w") as f:
            json.dump(everyone, f)
    T.cleanup(run)


if __name__ == "__main__":
    main()
