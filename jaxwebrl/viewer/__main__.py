"""Build a viewer from trajectory files: `python -m jaxwebrl.viewer runs/x/demonstrations.jsonl -o viewer.html`.

Each file becomes one policy (its name, or `--policy` per file); .jsonl and .array_record are read."""

from __future__ import annotations

import argparse
from pathlib import Path

from jaxwebrl.data.records import read_trajectories
from jaxwebrl.viewer.episodes import MAX_CHARS, episodes_from_trajectories
from jaxwebrl.viewer.page import MAX_EPISODES, MAX_SCREENSHOTS, write_viewer


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(prog="python -m jaxwebrl.viewer", description=__doc__)
    ap.add_argument("files", nargs="+", help="trajectory files (.jsonl or .array_record)")
    ap.add_argument("-o", "--out", default="viewer.html", help="the HTML file to write")
    ap.add_argument("--policy", action="append", default=[], help="policy label per file (default: file name)")
    ap.add_argument("--title", default="jaxwebrl trajectories")
    ap.add_argument("--max-episodes", type=int, default=MAX_EPISODES)
    ap.add_argument("--max-screenshots", type=int, default=MAX_SCREENSHOTS)
    ap.add_argument("--max-chars", type=int, default=MAX_CHARS)
    args = ap.parse_args(argv)
    if args.policy and len(args.policy) != len(args.files):
        ap.error(f"--policy was given {len(args.policy)} times for {len(args.files)} files: give one per file or none")
    episodes = []
    for i, f in enumerate(args.files):
        label = args.policy[i] if args.policy else Path(f).stem
        episodes += episodes_from_trajectories(read_trajectories(f), label, max_chars=args.max_chars)
    out = write_viewer(args.out, episodes, title=args.title, max_episodes=args.max_episodes,
                       max_screenshots=args.max_screenshots)
    print(f"{out}: {min(len(episodes), args.max_episodes)} of {len(episodes)} episodes")
    return out


if __name__ == "__main__":
    main()
