"""`python -m jaxwebrl.importers FORMAT IN OUT --tokenizer DIR`: a paper's released data -> our JSONL."""

from __future__ import annotations

import argparse
import json
import sys

from jaxwebrl.importers import FORMATS, FormatError, import_file, summary
from jaxwebrl.data.records import write_jsonl
from jaxwebrl.models.tokenizer import load_tokenizer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jaxwebrl.importers", description=__doc__)
    ap.add_argument("format", choices=sorted(FORMATS))
    ap.add_argument("input", help="local copy of the released file (.jsonl or .json)")
    ap.add_argument("output", help="Trajectory JSONL to write (the SFT pipeline's data.train_files)")
    ap.add_argument("--tokenizer", required=True, help="directory with the policy's tokenizer (and chat template)")
    args = ap.parse_args(argv)
    try:
        trajs = import_file(args.format, args.input, load_tokenizer(args.tokenizer))
    except (FormatError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_jsonl(args.output, trajs)
    print(json.dumps({"output": args.output, **summary(trajs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
