"""`python -m fuzz --seed S --n N --out DIR` (with tests/ on the path): a batch of fuzz cases, a repro per failure."""
import argparse
import sys

from .generator import ALL_FAMILIES, KNOWN_OPEN
from .runner import batch, worker


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    parser.add_argument("--seed", type=int, default=0, help="first case seed")
    parser.add_argument("--n", type=int, default=1000, help="number of cases")
    parser.add_argument("--out", default="fuzz_failures", help="directory for repro files")
    parser.add_argument("--families", default=",".join(ALL_FAMILIES), help="comma-separated families to draw from")
    parser.add_argument("--skip-known-open", action="store_true",
                        help="leave out the features of the known open bugs (generator.KNOWN_OPEN)")
    parser.add_argument("--probe", metavar="TEXT",
                        help="leave out the features of every known open bug except those whose name contains TEXT")
    parser.add_argument("--skip-indices", default="", help=argparse.SUPPRESS)
    parser.add_argument("--minimize", choices=("all", "new", "none"), default="new",
                        help="which failing cases to minimise: all, those using no known open feature (default), none")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seeds", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = set(families) - set(ALL_FAMILIES)
    if unknown:
        parser.error(f"unknown families: {', '.join(sorted(unknown))}; known: {', '.join(ALL_FAMILIES)}")
    names = list(KNOWN_OPEN)
    if args.worker:
        skip = [names[int(i)] for i in args.skip_indices.split(",") if i]
        worker([int(s) for s in args.seeds.split(",") if s], families, args.out, args.minimize, skip)
        return 0
    if args.probe:
        skip = [name for name in names if args.probe.lower() not in name.lower()]
    else:
        skip = names if args.skip_known_open else []
    failures = batch(args.seed, args.n, args.out, families, args.minimize, skip)
    return 1 if any(not f.shared for f in failures) else 0


if __name__ == "__main__":
    sys.exit(main())
