"""Issue 36, finding 3: a fresh process's first text embeddings, asked by several threads at once
(a server's first searches and its warm-up thread), all succeed and load one MiniLM.

transformers resolves ``AutoModel`` lazily and not safely for threads; before the fix about one
fresh process in two failed here with "cannot import name 'AutoModel' from 'transformers'". Each
run is a new interpreter (the race is in the first import); a few runs make a pass meaningful.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNS = 3
THREADS = 4

SCRIPT = r"""
import json, sys, threading
from chexretrieve.encoders.phantom import load_phantom_encoder

encoder = load_phantom_encoder(None)
threads = int(sys.argv[1])
barrier = threading.Barrier(threads)
errors, shapes = [], []

def first_texts(i):
    barrier.wait()
    try:
        shapes.append(encoder.embed_texts([f"pleural effusion {i}"]).shape)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")

workers = [threading.Thread(target=first_texts, args=(i,)) for i in range(threads)]
[w.start() for w in workers]
[w.join() for w in workers]
print(json.dumps({"errors": errors, "answered": len(shapes),
                  "one_minilm": encoder._sentence_encoder is not None}))
"""


def test_threads_embedding_their_first_texts_at_once_all_succeed():
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    for run in range(RUNS):
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(THREADS)],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["errors"] == [], (run, report["errors"])
        assert report["answered"] == THREADS and report["one_minilm"]
