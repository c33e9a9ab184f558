"""Keeping torch.cuda.memory._dump_snapshot files small enough to come back from the GPU machine
(each file at most 16 MiB there): the pickle as it is when it fits, else gzipped (vramscope
analyze reads the pickle: gunzip it first), else nothing, with the reason recorded."""

import gzip
import hashlib
import os
import shutil

LIMIT = 15 * 2**20  # under the 16 MiB a file may have to travel back


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def store_snapshot(raw, dest_dir, sid, limit=LIMIT):
    """Moves the dumped pickle `raw` to DEST_DIR/snapshot-SID.pickle (or .pickle.gz when only the
    gzipped file fits under limit) and says what it did: {"file", "bytes", "raw_bytes",
    "sha256", "gzipped", "dropped"}."""
    raw_bytes = os.path.getsize(raw)
    out = {"file": None, "bytes": None, "raw_bytes": raw_bytes, "sha256": None,
           "gzipped": False, "dropped": None}
    plain = os.path.join(dest_dir, f"snapshot-{sid}.pickle")
    if raw_bytes <= limit:
        shutil.move(raw, plain)
        out.update(file=os.path.basename(plain), bytes=raw_bytes, sha256=sha256(plain))
        return out
    gz = plain + ".gz"
    with open(raw, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.remove(raw)
    size = os.path.getsize(gz)
    if size <= limit:
        out.update(file=os.path.basename(gz), bytes=size, sha256=sha256(gz), gzipped=True)
    else:
        os.remove(gz)
        out["dropped"] = f"gzipped snapshot is {size} B, over the {limit} B limit"
    return out
