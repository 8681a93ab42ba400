"""python -m torch_pjrt info | demo | conformance | fuzz | transformers-spec"""

import argparse
import sys


def info() -> int:
    import os

    import torch
    import torch_pjrt

    p = torch_pjrt.plugin_info()
    print(f"torch_pjrt {torch_pjrt.__version__}, torch {torch.__version__}")
    print(f"extensions:       for torch {', '.join(torch_pjrt._extensions())}; loaded "
          f"{os.path.basename(torch_pjrt._C.__file__)}")
    if not p["available"]:
        print(f"no PJRT plugin available: {p['reason']}")
        return 1
    print(f"plugin:           {p['path']} ({p['kind']})")
    print(f"PJRT API:         {p['api_version']}")
    print(f"platform:         {p['platform']} {p['platform_version']}")
    for k, v in sorted(p["attributes"].items()):
        print(f"attribute:        {k} = {v}")
    print(f"program cache:    {p['cache_dir'] or 'memory only'}")
    print(f"devices:          {len(p['devices'])}")
    for d in p["devices"]:
        print(f"  tpu:{d['index']}  kind={d['kind']}  id={d['id']}  {d['description']}")
    from . import aot, distributed

    have = {k: bool(torch_pjrt._C._find_plugin(k)) for k in ("cuda", "tpu")}
    print("deviceless targets (TORCH_PJRT_AOT_TARGETS):")
    for name, (kind, device) in aot.targets().items():
        print(f"  {name:13s} {device:32s} {'plugin installed' if have[kind] else 'needs the ' + kind + ' plugin'}")
    active = aot.report(wait=False)
    if active:
        print(f"  active: {', '.join(active['targets'])}")

    print(f"torch.distributed: backend {distributed.BACKEND!r}; ranks in several processes: host transport "
          f"({distributed.transport_reason()})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_pjrt")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="the PJRT plugin and its devices")
    demo = sub.add_parser("demo", help="the main job: Hugging Face models on 'tpu', checked against the CPU")
    demo.add_argument("--once", action="store_true", help="skip the second run (the warm on-disk cache)")
    demo.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    sub.add_parser("conformance", add_help=False, help="op conformance over PyTorch's OpInfo database (see --help)")
    spec = sub.add_parser("transformers-spec", help="write torch_pjrt_spec.py for TRANSFORMERS_TEST_DEVICE_SPEC")
    spec.add_argument("folder", nargs="?", default=".")
    sub.add_parser("fuzz", add_help=False, help="differential fuzzing against the CPU (see --help)")
    args, rest = parser.parse_known_args(argv)
    if args.command == "conformance":
        from .conformance import main as conformance

        return conformance(rest)
    if args.command == "fuzz":
        from .fuzz import main as fuzz

        return fuzz(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "info":
        return info()
    if args.command == "transformers-spec":
        from .transformers_spec import write_stub

        print(write_stub(args.folder))
        return 0
    from .demo import run

    return run(second_pass=not args.once, child=args.child)


if __name__ == "__main__":
    sys.exit(main())
