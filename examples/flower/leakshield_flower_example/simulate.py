"""Run the example in Flower's simulation engine (Ray backend) from Python, without a SuperLink:

    python -m leakshield_flower_example.simulate --clients 10 --rounds 3 --out runs/flower-example
    python -m leakshield_flower_example.simulate --secagg --rounds 3 --out runs/flower-secagg

Telemetry is off (FLWR_TELEMETRY_ENABLED=0) and nothing is installed at run time: the apps are
imported from this package."""

import argparse
import os
import threading
import time
from pathlib import Path

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import yaml
from flwr.simulation import run_simulation

from leakshield.experiment.config import load_config
from leakshield.flower import client_app, secure_client_app, secure_server_app, server_app

HERE = Path(__file__).parent


class TreeMemory(threading.Thread):
    """Samples the proportional set size (PSS: shared pages split among their users) of this process
    and all its descendants (Ray's raylet, workers and client actors) every 0.5 s; Linux only."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kib, self.running = 0, True

    def run(self) -> None:
        while self.running:
            self.peak_kib = max(self.peak_kib, self.sample())
            time.sleep(0.5)

    @staticmethod
    def sample() -> int:
        parents: dict[int, int] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                parents[int(stat.parent.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
        tree, frontier = {os.getpid()}, [os.getpid()]
        while frontier:
            pid = frontier.pop()
            children = [c for c, p in parents.items() if p == pid and c not in tree]
            tree.update(children)
            frontier.extend(children)
        total = 0
        for pid in tree:
            try:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
            except (OSError, ValueError):
                continue
        return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="experiment YAML (default: federation.yaml, "
                        "with --secagg secagg.yaml)")  # fmt: skip
    parser.add_argument("--secagg", action="store_true", help="under SecAgg+ (the audit sees the mean only)")
    parser.add_argument("--clients", type=int, default=None, help="override fl.clients of the config")
    parser.add_argument("--rounds", type=int, default=3, help="FL rounds")
    parser.add_argument("--audit-clients", type=int, default=5, help="replies attacked a round (0: none)")
    parser.add_argument("--out", default="runs/flower-example", help="the audit's run directory")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPUs Ray may use")
    args = parser.parse_args()
    config_path = Path(args.config or HERE / ("secagg.yaml" if args.secagg else "federation.yaml"))
    if args.clients is not None:
        config = load_config(config_path)
        config = config.model_copy(update={"fl": config.fl.model_copy(update={"clients": args.clients})})
        config_path = Path(args.out).with_suffix(".config.yaml")
        config_path.parent.mkdir(parents=True, exist_ok=True)
        config_path.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    clients = load_config(config_path).fl.clients
    defaults = {"num-rounds": args.rounds, "out": args.out, "audit-clients": args.audit_clients}
    memory = TreeMemory()
    memory.start()
    start = time.time()
    server, client = (secure_server_app, secure_client_app) if args.secagg else (server_app, client_app)
    run_simulation(
        server(config_path.absolute(), defaults=defaults),
        client(config_path.absolute()),
        num_supernodes=clients,
        backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": args.cpus}},
    )
    wall = time.time() - start
    memory.running = False
    memory.join()
    print(f"{clients} clients × {args.rounds} rounds: {wall:.1f} s wall; peak memory (PSS of this process "
          f"and Ray's) {memory.peak_kib / 1024:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
