"""The `wtxt` Python package against the real CLI and real files.

Run by scripts/test.sh (the README's test command) after
`python3 -m pip install ./python`."""
import calendar
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import wtxt

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "wtxt"
CLI = os.environ.get("WTXT_BIN") or shutil.which("wtxt") or str(ROOT / "target" / "debug" / "wtxt")


def cli(*args, env=None):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env, cwd=FIXTURES)


@pytest.fixture(autouse=True)
def fixed_time(monkeypatch):
    # The golden vectors' timestamp, for byte-for-byte comparisons.
    ts = calendar.timegm(time.strptime("2026-02-02T12:00:00Z", "%Y-%m-%dT%H:%M:%SZ"))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(ts))


ALL = {
    "f64": np.array([1.5, -2.0], dtype="<f8"),
    "f32": np.arange(6, dtype="<f4").reshape(2, 3),
    "f16": np.array([0.5, 1.0, -3.0], dtype="<f2"),
    "i64": np.array([-(2**62), 5], dtype="<i8"),
    "u64": np.array([2**63 + 7], dtype="<u8"),
    "i32": np.array([[1, -2], [3, -4]], dtype="<i4"),
    "u32": np.array([4000000000], dtype="<u4"),
    "i16": np.array([-300], dtype="<i2"),
    "u16": np.array([65000, 1], dtype="<u2"),
    "i8": np.array([-128, 127], dtype="i1"),
    "u8": np.array([255, 0], dtype="u1"),
    "bool": np.array([True, False, True]),
    "rank0": np.array(3.25, dtype="<f8"),
    "empty": np.zeros((0, 4), dtype="<f4"),
    "model.layers.0.self_attn.q_proj.weight": np.arange(8, dtype="<f4").reshape(2, 4),
}


def test_every_dtype_rank0_zero_size_and_dotted_names_round_trip(tmp_path):
    f = tmp_path / "m.wtxt"
    wtxt.save_file(ALL, f, metadata={"format": "pt", "step": "10"})
    back = wtxt.load_file(f)
    assert sorted(back) == sorted(ALL)
    for k, v in ALL.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
        assert np.array_equal(back[k], v), k
    assert wtxt.load_metadata(f) == {"format": "pt", "step": "10"}
    assert wtxt.verify(f).ok
    # The arrays are NumPy's own, writable, and share nothing with a second load.
    a = back["f32"]
    assert a.flags.writeable
    a[0, 0] = 99
    assert wtxt.load_file(f)["f32"][0, 0] == 0


def test_load_file_holds_each_array_once(tmp_path):
    # The decoded bytes become the NumPy array's memory: a copy on the way
    # (a bytearray, bytes) would double the peak. Measured in a fresh
    # process, against the array's own size.
    f = tmp_path / "big.wtxt"
    wtxt.save_file({"w": np.ones((1 << 15, 1024), dtype="<f4")}, f)  # 128 MiB
    # VmHWM, not ru_maxrss: the latter keeps what the forking pytest held.
    code = (
        "import re, sys, wtxt\n"
        "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
        "before = hwm()\n"
        "w = wtxt.load_file(sys.argv[1])['w']\n"
        "assert w.shape == (1 << 15, 1024) and w[-1, -1] == 1\n"
        "print((hwm() - before) >> 10)\n"
    )
    grown = int(subprocess.run(["python3", "-c", code, str(f)], capture_output=True, text=True, check=True).stdout)
    assert grown < 128 * 3 // 2, f"peak grew by {grown} MiB for a 128 MiB array"


def test_bf16_comes_back_as_bits_or_ml_dtypes(tmp_path):
    f = tmp_path / "ext.wtxt"
    r = cli("snapshot", "inputs/ext.safetensors", "-o", f)
    assert r.returncode == 0, r.stderr
    back = wtxt.load_file(f)
    try:
        import ml_dtypes  # noqa: F401
        assert back["act_bf16"].dtype.name == "bfloat16"
    except ImportError:
        assert back["act_bf16"].dtype == np.dtype("<u2")


def test_python_writes_the_golden_vector_byte_for_byte(tmp_path):
    # The golden `defaults` case is `wtxt snapshot inputs/model.npz` at this ts.
    with np.load(FIXTURES / "inputs" / "model.npz") as z:
        arrays = {k: z[k] for k in z.files}
    f = tmp_path / "py.wtxt"
    wtxt.save_file(arrays, f)
    assert f.read_bytes() == (FIXTURES / "expected" / "defaults.wtxt").read_bytes()


def test_what_python_writes_the_cli_reads_with_its_names(tmp_path):
    f = tmp_path / "m.wtxt"
    wtxt.save_file({"transformer.h.0.attn.c_attn.bias": np.ones(3, "<f4")}, f, metadata={"format": "pt"})
    out = tmp_path / "m.safetensors"
    r = cli("extract", f, "-o", out)
    assert r.returncode == 0, r.stderr
    b = out.read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8:8 + n])
    assert "transformer.h.0.attn.c_attn.bias" in header and header["__metadata__"] == {"format": "pt"}
    # And what the CLI writes, Python reads.
    cf = tmp_path / "cli.wtxt"
    assert cli("snapshot", out, "-o", cf).returncode == 0
    assert list(wtxt.load_file(cf)) == ["transformer.h.0.attn.c_attn.bias"]


def test_a_damaged_line_raises_verify_error_with_its_line(tmp_path):
    f = tmp_path / "m.wtxt"
    wtxt.save_file({"w": np.arange(100, dtype="<f4")}, f)
    lines = f.read_bytes().split(b"\n")
    k = next(i for i, l in enumerate(lines) if l.startswith(b"ch ")) + 1
    lines[k] = (b"B" if lines[k][:1] == b"A" else b"A") + lines[k][1:]
    f.write_bytes(b"\n".join(lines))
    with pytest.raises(wtxt.VerifyError) as e:
        wtxt.load_file(f)
    assert e.value.line == k + 1
    # Asking for the metadata alone still verifies every array.
    with pytest.raises(wtxt.VerifyError) as e:
        wtxt.load_metadata(f)
    assert e.value.line == k + 1
    report = wtxt.verify(f)
    assert not report.ok and report.errors[0][0] == k + 1
    # Nothing chains from it: the next generation is refused, not written.
    g = tmp_path / "g1.wtxt"
    with pytest.raises(wtxt.VerifyError) as e:
        wtxt.save_file({"w": np.zeros(4)}, g, prev=f)
    assert e.value.line == k + 1 and "--prev" in str(e.value)
    assert not g.exists()


def test_keys_and_signatures(tmp_path):
    f = tmp_path / "s.wtxt"
    keys = FIXTURES / "keys"
    wtxt.save_file({"w": np.ones(4)}, f, sign_key=keys / "sign.pem", hmac_key=keys / "hmac.hex")
    assert wtxt.load_file(f, hmac_key=keys / "hmac.hex", pubkey=keys / "sign.pem.pub", require_signature=True)
    assert wtxt.verify(f, pubkey=keys / "sign.pem.pub").signature == "valid"
    with pytest.raises(wtxt.VerifyError):
        wtxt.load_file(f, pubkey=keys / "other.pem.pub", require_signature=True)
    g = tmp_path / "g1.wtxt"
    wtxt.save_file({"w": np.zeros(4)}, g, prev=f)
    assert wtxt.verify(g, prev=f).gen == 1


def test_bad_input_raises_and_writes_nothing(tmp_path):
    f = tmp_path / "x.wtxt"
    for bad, why in [
        ({"a": [1, 2, 3]}, "expected a NumPy array"),
        ({"a": np.array([object()], dtype=object)}, "object"),
        ({"a": np.array(["s"])}, "no WTXT equivalent"),
        ({"__npz": np.ones(2)}, "reserved"),
        ("not a dict", "expected a dict"),
    ]:
        with pytest.raises(wtxt.Error, match=why):
            wtxt.save_file(bad, f)
        assert not f.exists()
    with pytest.raises(wtxt.Error, match="part size"):
        wtxt.save_file({"a": np.ones(2)}, f, part_size="12")
    assert not f.exists()
    with pytest.raises(wtxt.Error):
        wtxt.load_file(tmp_path / "missing.wtxt")


def test_views_big_endian_and_colliding_names_are_kept_right(tmp_path):
    base = np.arange(24, dtype="<f8").reshape(4, 6)
    arrays = {"view": base[:, ::2], "big": np.arange(3, dtype=">i4"), "a.b": np.ones(1), "a_b": np.zeros(1)}
    f = tmp_path / "v.wtxt"
    wtxt.save_file(arrays, f)
    back = wtxt.load_file(f)
    assert np.array_equal(back["view"], base[:, ::2]) and back["view"].flags.c_contiguous
    assert np.array_equal(back["big"], [0, 1, 2]) and back["big"].dtype == np.dtype("<i4")
    assert back["a.b"][0] == 1 and back["a_b"][0] == 0


def test_split_snapshots_save_and_load_with_the_cli(tmp_path):
    rng = np.random.default_rng(3)
    tensors = {"model.embed.weight": rng.standard_normal((3000, 128)).astype(np.float32),
               "model.norm.bias": np.arange(7, dtype=np.float32)}
    head = tmp_path / "m.wtxt"
    single = tmp_path / "one.wtxt"
    sha_split = wtxt.save_file(tensors, head, part_size="256K")
    sha_one = wtxt.save_file(tensors, single, part_size="none")
    assert sha_split == sha_one
    parts = sorted((tmp_path / "m.wtxt.parts").iterdir())
    assert len(parts) >= 4 and all(p.stat().st_size <= 256 << 10 for p in parts)
    back = wtxt.load_file(head)
    assert back.keys() == tensors.keys()
    for k in tensors:
        assert np.array_equal(back[k], tensors[k])
    joined = tmp_path / "joined.wtxt"
    subprocess.run([CLI, "join", str(head), "-o", str(joined)], check=True, capture_output=True)
    assert joined.read_bytes() == single.read_bytes()
    parts[1].write_bytes(parts[1].read_bytes()[:-10])
    with pytest.raises(wtxt.VerifyError) as e:
        wtxt.load_file(head)
    assert "000002.wtxtpart" in str(e.value)


def _git(*args, cwd=None):
    return subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True, check=True).stdout


def _repos(tmp_path):
    repo, remote = tmp_path / "repo", tmp_path / "remote.git"
    _git("init", "-q", "-b", "main", repo)
    _git("init", "-q", "--bare", "-b", "main", remote)
    return repo, remote


def test_snapshotter_commits_and_pushes_what_was_published(tmp_path):
    repo, remote = _repos(tmp_path)
    state = {"transformer.h.0.attn.c_attn.weight": np.ones((300, 64), np.float32),
             "step": np.array(0, np.int64)}
    futures = []
    with wtxt.Snapshotter(repo, path_in_repo="model.wtxt", remote=str(remote), part_size="64K") as snap:
        for step in range(3):
            state["step"][...] = step
            state["transformer.h.0.attn.c_attn.weight"][:] = step
            assert snap.publish(state) == step
            futures.append(snap.request_snapshot())
            # Changed right after publish: the snapshot holds the published values.
            state["transformer.h.0.attn.c_attn.weight"][:] = -99
        infos = [f.result(timeout=60) for f in futures]
        snap.flush()
        status = snap.status()
    assert infos[-1].gen == 2 and infos[-1].commit
    assert all(i.pushed for i in infos) and [i.gen for i in infos] == sorted(i.gen for i in infos)
    assert status["last_gen"] == 2 and status["resend_queue"] == 0 and status["last_error"] is None
    assert _git("rev-parse", "main", cwd=remote).strip() == infos[-1].commit
    back = wtxt.load_file(repo / "model.wtxt")
    assert back["step"] == 2 and (back["transformer.h.0.attn.c_attn.weight"] == 2).all()
    parts = _git("ls-files", cwd=repo).split()
    assert "model.wtxt" in parts and any(p.startswith("model.wtxt.parts/") for p in parts)
    assert wtxt.verify(repo / "model.wtxt").ok
    # The first commit set up the diff driver: `git diff` shows the tensors, not the head's lines.
    assert "git diff-driver" in _git("config", "diff.wtxt.command", cwd=repo)
    shown = _git("diff", "HEAD~1", "HEAD", cwd=repo)
    assert "header gen: 000001 -> 000002" in shown, shown
    assert "transformer.h.0.attn.c_attn.weight" in shown and "element(s) changed" in shown, shown


def _eight_generations(snapshotter):
    """Publishes and requests generations 0-7 as fast as it can; returns
    what each request came to and the status after them."""
    state = {"w": np.zeros((2000, 64), np.float32)}
    with snapshotter as snap:
        futures = []
        for step in range(8):
            state["w"][:] = step
            snap.publish(state)
            futures.append(snap.request_snapshot())
        infos = [f.result(timeout=120) for f in futures]
        return infos, snap.status()


def test_every_requested_generation_is_committed_on_its_own_and_pushed_unless_coalescing(tmp_path):
    repo, remote = _repos(tmp_path)
    # Requested faster than a generation is committed and pushed.
    infos, status = _eight_generations(wtxt.Snapshotter(repo, remote=str(remote), part_size="64K"))
    assert [i.gen for i in infos] == list(range(8)) and all(i.pushed for i in infos)
    assert status["coalesced"] == 0 and status["snapshots_written"] == 8
    # One commit per generation reached the remote, each holding its own values.
    commits = _git("rev-list", "--reverse", "main", cwd=remote).split()
    assert len(commits) == 8 and [i.commit for i in infos] == commits
    clone = tmp_path / "clone"
    _git("clone", "-q", str(remote), str(clone), cwd=tmp_path)
    _git("checkout", "-q", commits[3], cwd=clone)
    assert (wtxt.load_file(clone / "model.wtxt")["w"] == 3).all()
    # A reviewer's clone without wtxt: the committed attributes keep parts
    # out of `git diff` (no base64 printed), the heads stay readable text.
    diff = _git("diff", commits[2], commits[3], cwd=clone)
    assert "Binary files" in diff and "gen=000003" in diff and len(diff) < 20000, diff[:2000]

    # coalesce=True: a request never waits; those made while one waits fold into it.
    repo2, remote2 = _repos(tmp_path / "c")
    infos, status = _eight_generations(wtxt.Snapshotter(repo2, remote=str(remote2), coalesce=True))
    assert status["coalesced"] + status["snapshots_written"] == 8 and status["last_gen"] == 7
    assert infos[-1].gen == 7 and all(i.gen >= g for i, g in zip(infos, range(8)))
    with pytest.raises(wtxt.Error, match="max_pending"):
        wtxt.Snapshotter(repo2, max_pending=0)


def test_a_callback_asking_for_status_while_flush_waits_does_not_hang(tmp_path):
    """flush() waits holding the Snapshotter's lock; a future's callback that
    calls status() must not wait for that lock while holding the GIL (it
    stopped every Python thread). Run in its own process, so a hang fails
    the test instead of stopping the suite."""
    repo, remote = _repos(tmp_path)
    script = f"""
import numpy as np, wtxt
seen = []
with wtxt.Snapshotter({str(repo)!r}, remote={str(remote)!r}) as snap:
    for i in range(6):
        snap.publish({{"w": np.full((20000, 256), i, np.float32)}})
        snap.request_snapshot().add_done_callback(lambda f: seen.append(snap.status()["last_gen"]))
    snap.flush()
print(len(seen))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "6", r.stdout + r.stderr


def test_a_failing_remote_fails_the_future_and_the_queue_drains_when_it_is_back(tmp_path):
    repo, remote = _repos(tmp_path)
    later = tmp_path / "later.git"
    with wtxt.Snapshotter(repo, remote=str(later)) as snap:
        snap.publish({"w": np.zeros(4, np.float32)})
        with pytest.raises(wtxt.Error, match="committed but not pushed"):
            snap.request_snapshot().result(timeout=60)
        st = snap.status()
        assert st["resend_queue"] == 1 and "push to" in st["last_error"]
        os.rename(remote, later)  # the remote comes back
        snap.flush()
        assert snap.status()["resend_queue"] == 0
        snap.publish({"w": np.ones(4, np.float32)})
        assert snap.request_snapshot().result(timeout=60).pushed
    assert len(_git("log", "--oneline", "main", cwd=later).splitlines()) == 2


def test_snapshotter_refuses_bad_input_and_keeps_working(tmp_path):
    repo, _ = _repos(tmp_path)
    snap = wtxt.Snapshotter(repo)
    for bad, why in [({"a": object()}, "neither a tensor nor a plain Python value"),
                     ({"a": np.array([object()], dtype=object)}, "object"),
                     ({1: np.ones(2)}, "names must be str"),
                     ("x", "expected a dict")]:
        with pytest.raises(wtxt.Error, match=why):
            snap.publish(bad)
    # A strided view and a big-endian array are staged as C-order little-endian copies.
    base = np.arange(24, dtype=">f4").reshape(4, 6)
    snap.publish({"view": base[:, ::2], "be": base})
    info = snap.request_snapshot().result(timeout=60)
    assert info.gen == 0 and info.commit
    back = wtxt.load_file(repo / "model.wtxt")
    assert (back["view"] == base[:, ::2]).all() and (back["be"] == base).all()
    snap.close()
    with pytest.raises(wtxt.Error, match="closed"):
        snap.publish({"a": np.ones(2)})
    with pytest.raises(wtxt.Error, match="closed"):
        snap.request_snapshot()
    snap.close()  # twice is fine


def test_torch_state_dicts_round_trip(tmp_path):
    torch = pytest.importorskip("torch")  # torch is optional: the helper exists when it is importable
    import wtxt.torch as wt

    sd = {"layer.weight": torch.randn(4, 3), "layer.bias": torch.zeros(3, dtype=torch.bfloat16),
          "steps": torch.tensor(7)}
    f = tmp_path / "m.wtxt"
    wt.save_state_dict(sd, f)
    back = wt.load_state_dict(f)
    assert back.keys() == sd.keys()
    for k in sd:
        assert back[k].dtype == sd[k].dtype and torch.equal(back[k], sd[k])


def test_stored_literals_are_only_what_the_writer_writes(tmp_path, monkeypatch):
    """`__objects` entries the writer never writes (a set of lists, a dict
    keyed by one, a complex number, `...`, a float that overflows to inf)
    are refused on load as `wtxt.Error` naming the entry; what it writes
    comes back equal."""
    torch = pytest.importorskip("torch")
    import wtxt.torch as wt

    f = tmp_path / "o.wtxt"
    good = {"step": 7, "betas": (0.9, 0.999), "names": {"a", "b"}, "m": [b"x", None, True]}
    wt.save_state_dict(dict(good, w=torch.ones(2)), f)
    back = wt.load_state_dict(f)
    assert {k: back[k] for k in good} == good
    # A file another writer made: the literal text stored as it is.
    monkeypatch.setattr(wt, "literal", lambda name, value: value)
    for text in ["{[1]}", "{[1]: 2}", "1j", "...", "1e999", "[-1e999]", "(1, 2j)"]:
        wt.save_state_dict({"w": torch.ones(2), "x": text}, f)
        with pytest.raises(wtxt.Error, match="__objects: entry 'x'"):
            wt.load_state_dict(f)


class _DLPackOnly:
    """A tensor from another library, seen only through DLPack (as a CPU torch tensor is)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_tensors_are_saved_and_published_without_torch(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    f = tmp_path / "d.wtxt"
    wtxt.save_file({"layer.weight": _DLPackOnly(a)}, f)
    assert (wtxt.load_file(f)["layer.weight"] == a).all()
    repo, _ = _repos(tmp_path)
    with wtxt.Snapshotter(repo) as snap:
        snap.publish({"layer.weight": _DLPackOnly(a)})
        assert snap.request_snapshot().result(timeout=60).gen == 0
        # No remote: nothing waits to be pushed.
        assert snap.status()["resend_queue"] == 0
    assert (wtxt.load_file(repo / "model.wtxt")["layer.weight"] == a).all()


def test_publish_from_many_threads_gives_unique_increasing_generations(tmp_path):
    import threading
    repo, _ = _repos(tmp_path)
    got, futures, lock = [], [], threading.Lock()
    with wtxt.Snapshotter(repo) as snap:
        def worker(k):
            for i in range(20):
                g = snap.publish({"w": np.full(16, k * 100 + i, np.float32)})
                f = snap.request_snapshot()
                with lock:
                    got.append(g)
                    futures.append(f)
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        infos = [f.result(timeout=120) for f in futures]  # every future resolves
        snap.flush()
        last = snap.status()["last_gen"]
    assert sorted(got) == list(range(160)), "unique and without gaps"
    assert last == 159 and all(i.commit for i in infos)
    assert wtxt.verify(repo / "model.wtxt").gen == 159


def test_two_snapshotters_on_one_repository_keep_each_others_files(tmp_path):
    repo, _ = _repos(tmp_path)
    a = wtxt.Snapshotter(repo, path_in_repo="rank0.wtxt")
    b = wtxt.Snapshotter(repo, path_in_repo="rank1.wtxt")
    futures = []
    for step in range(4):
        a.publish({"w": np.full(64, step, np.float32)})
        b.publish({"m": np.full(64, -step, np.float32)})
        futures += [a.request_snapshot(), b.request_snapshot()]
    infos = [f.result(timeout=120) for f in futures]
    a.close()
    b.close()
    files = set(_git("ls-files", cwd=repo).split())
    assert {"rank0.wtxt", "rank1.wtxt"} <= files, files
    # Every commit a future names holds the file it reported.
    for i, info in enumerate(infos):
        path = "rank0.wtxt" if i % 2 == 0 else "rank1.wtxt"
        assert path in _git("ls-tree", "--name-only", info.commit, cwd=repo).split()
    for path in ("rank0.wtxt", "rank1.wtxt"):
        log = cli("log", "--verify", "-C", repo, path)
        assert log.returncode == 0, log.stdout + log.stderr
    # One ring shared by two is refused, not raced.
    c = wtxt.Snapshotter(repo, path_in_repo="x.wtxt", ring=str(tmp_path / "ring"))
    with pytest.raises(wtxt.Error, match="in use by another"):
        wtxt.Snapshotter(repo, path_in_repo="y.wtxt", ring=str(tmp_path / "ring"))
    c.close()
    with pytest.raises(wtxt.Error, match="inside the repository"):
        wtxt.Snapshotter(repo, path_in_repo="../outside.wtxt")
    # T5-13: another spelling of a path, and Git's own files, at any depth.
    for other in ("./a.wtxt", "a//b.wtxt", "a/./b.wtxt", "a/"):
        with pytest.raises(wtxt.Error, match="plain names"):
            wtxt.Snapshotter(repo, path_in_repo=other)
    for own in (".gitattributes", ".gitmodules", "sub/.GITIGNORE", ".Git/config"):
        with pytest.raises(wtxt.Error, match="Git's own"):
            wtxt.Snapshotter(repo, path_in_repo=own)


def test_publish_takes_torch_bf16_and_parameters_that_require_grad(tmp_path):
    torch = pytest.importorskip("torch")
    repo, _ = _repos(tmp_path)
    model = torch.nn.Linear(4, 3).to(torch.bfloat16)
    with wtxt.Snapshotter(repo) as snap:
        snap.publish(dict(model.named_parameters()))
        assert snap.request_snapshot().result(timeout=60).commit
    import wtxt.torch as wt
    back = wt.load_state_dict(repo / "model.wtxt")
    assert back["weight"].dtype == torch.bfloat16 and torch.equal(back["weight"], model.weight.detach())


def test_publish_takes_a_loops_nested_state_and_gives_it_back_as_wtxt_torch_does(tmp_path):
    """Issue 69.2: model and AdamW `state_dict()`s published as they are;
    the snapshot holds what `wtxt.torch.save_state_dict` writes of the same
    state, and an optimizer loaded from it steps exactly as the original."""
    torch = pytest.importorskip("torch")
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    import wtxt.torch as wt

    def put(tree, path, value):
        """Sets `value` at a flattened name's path (whose keys DCP wrote as text)."""
        for key in path[:-1]:
            tree = tree[key if isinstance(tree, dict) and key in tree else int(key)]
        last = path[-1]
        tree[last if isinstance(tree, dict) and last in tree else int(last)] = value

    def setup():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        return model, torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.8, 0.99))

    def step(model, opt):
        torch.manual_seed(len(opt.state))
        model(torch.randn(16, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    model, opt = setup()
    for _ in range(3):
        step(model, opt)
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}
    repo, _ = _repos(tmp_path)
    with wtxt.Snapshotter(repo) as snap:
        snap.publish(state)
        assert snap.request_snapshot().result(timeout=60).commit
    ref = tmp_path / "ref.wtxt"
    wt.save_state_dict(state, ref, gen=0)
    got, want = wt.load_state_dict(repo / "model.wtxt"), wt.load_state_dict(ref)
    assert got.keys() == want.keys() and got["epoch"] == 3 and got["optim.param_groups.0.betas"] == (0.8, 0.99)
    for k, v in want.items():
        assert torch.equal(got[k], v) if isinstance(v, torch.Tensor) else got[k] == v, k
    # Back into a fresh model and optimizer: the next steps are the same.
    model2, opt2 = setup()
    step(model2, opt2)  # AdamW's state exists once it has stepped
    back = {"model": model2.state_dict(), "optim": opt2.state_dict(), "epoch": 0}
    _, mapping = flatten_state_dict(back)
    for name, path in mapping.items():
        put(back, path, got[name])
    model2.load_state_dict(back["model"])
    opt2.load_state_dict(back["optim"])
    for _ in range(2):
        step(model, opt)
        step(model2, opt2)
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)
    # A nested value that has no literal form is refused, naming it.
    with wtxt.Snapshotter(repo, path_in_repo="other.wtxt") as snap:
        with pytest.raises(wtxt.Error, match="odd"):
            snap.publish({"w": np.ones(2, np.float32), "odd": object()})


def test_a_subclass_cannot_point_publish_or_save_at_other_memory(tmp_path):
    class Liar(np.ndarray):
        @property
        def nbytes(self):
            return 1 << 16

    a = np.arange(4, dtype=np.float32).view(Liar)
    wtxt.save_file({"a": a}, tmp_path / "a.wtxt")
    assert (wtxt.load_file(tmp_path / "a.wtxt")["a"] == np.arange(4, dtype=np.float32)).all()


def test_torch_files_are_named_not_misread(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(2)}, tmp_path / "m.pt")
    r = cli("snapshot", tmp_path / "m.pt", "-o", tmp_path / "o.wtxt")
    assert r.returncode == 2 and "torch.save" in r.stderr and "save_state_dict" in r.stderr, r.stderr
    assert not (tmp_path / "o.wtxt").exists()


def test_a_script_that_exits_while_a_snapshotter_is_busy_exits_cleanly(tmp_path):
    import sys
    repo, _ = _repos(tmp_path)
    script = (
        "import numpy as np, wtxt\n"
        f"s = wtxt.Snapshotter({str(repo)!r})\n"
        "for i in range(5):\n"
        "    s.publish({'w': np.full((256, 256), i, np.float32)})\n"
        "    s.request_snapshot()\n"
        "# exits without close(): the open Snapshotter is finished at exit\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "FATAL" not in r.stderr
    assert wtxt.verify(repo / "model.wtxt").ok


def test_a_key_demands_the_tag_that_binds_the_file_whole(tmp_path):
    key = FIXTURES / "keys" / "hmac.hex"
    path = tmp_path / "m.wtxt"
    wtxt.save_file({"a": np.ones(4, "<f4"), "b": np.zeros(4, "<f4")}, path, hmac_key=key)
    assert "wtxt.bind=" in path.read_text().splitlines()[-2]
    assert set(wtxt.load_file(path, hmac_key=key)) == {"a", "b"}
    # Another writer's HMAC'd 1.1 file binds nothing: refused unless told.
    other = FIXTURES / "expected" / "hmac.wtxt"
    with pytest.raises(wtxt.VerifyError, match="no keyed tag"):
        wtxt.load_file(other, hmac_key=key)
    assert wtxt.load_file(other, hmac_key=key, allow_unbound=True)
    assert not wtxt.verify(other, hmac_key=key).ok
    assert wtxt.verify(other, hmac_key=key, allow_unbound=True).ok


def test_load_file_names_reads_those_tensors_proven_as_a_whole_load(tmp_path):
    """`load_file(names=[...])`: exactly the bytes a whole load gives; in the
    tree form a damaged chunk of another array is not its concern, a
    damaged chunk of its own is refused; in the 1.1 form every byte still
    counts. A name listed twice, or no name, is an error."""
    rng = np.random.default_rng(3)
    arrays = {"a.weight": rng.standard_normal((300, 16)).astype(np.float32),
              "b.weight": rng.standard_normal((300, 16)).astype(np.float32),
              "scale": np.array(2.5, np.float64)}

    def damaged(path, name):
        lines = path.read_text().split("\n")
        at = next(i for i, line in enumerate(lines) if line.startswith(f"arr name={name} "))
        at = next(i for i in range(at, len(lines)) if lines[i].startswith("ch ")) + 1
        lines[at] = ("B" if lines[at][3] == "A" else "A").join([lines[at][:3], lines[at][4:]])
        bad = path.with_name(f"bad-{name}-{path.name}")
        bad.write_text("\n".join(lines))
        return bad

    for digest in ("tree", "sha256"):
        path = tmp_path / f"{digest}.wtxt"
        wtxt.save_file(arrays, path, digest=digest)
        whole = wtxt.load_file(path)
        got = wtxt.load_file(path, names=["a.weight", "scale"])
        assert sorted(got) == ["a.weight", "scale"]
        for k, v in got.items():
            assert v.dtype == whole[k].dtype and v.shape == whole[k].shape and (v == whole[k]).all(), k
        with pytest.raises(wtxt.Error, match="no tensor named"):
            wtxt.load_file(path, names=["absent"])
        with pytest.raises(wtxt.Error, match="names=\\[\\] asks for no tensor"):
            wtxt.load_file(path, names=[])
        with pytest.raises(wtxt.Error, match="names lists 'a.weight' more than once"):
            wtxt.load_file(path, names=["a.weight", "scale", "a.weight"])
        with pytest.raises(wtxt.VerifyError):
            wtxt.load_file(damaged(path, "a_weight"), names=["a.weight"])
        other = damaged(path, "b_weight")
        with pytest.raises(wtxt.VerifyError):
            wtxt.load_file(other)
        if digest == "tree":
            assert (wtxt.load_file(other, names=["a.weight"])["a.weight"] == arrays["a.weight"]).all()
        else:
            with pytest.raises(wtxt.VerifyError):
                wtxt.load_file(other, names=["a.weight"])


def test_load_file_rev_reads_a_past_generation_and_names_from_its_parts(tmp_path):
    """`load_file(path, rev=..., names=[...])`: the tensors a revision of a
    snapshot in Git holds, verified; a name it does not hold raises."""
    rng = np.random.default_rng(5)
    work = tmp_path / "w"
    work.mkdir()
    _git("init", "-q", cwd=work)
    _git("config", "user.email", "a@b", cwd=work)
    _git("config", "user.name", "a", cwd=work)
    path = work / "m.wtxt"
    gens = []
    for gen in range(2):
        arrays = {f"layer.{i}.weight": rng.standard_normal((256, 64)).astype(np.float32) for i in range(6)}
        wtxt.save_file(arrays, path, digest="tree", part_size="64K", gen=gen)
        _git("add", "-A", cwd=work)
        _git("commit", "-q", "--no-verify", "-m", f"gen {gen}", cwd=work)
        gens.append(arrays)
    got = wtxt.load_file(path, rev="HEAD~1", names=["layer.3.weight"])
    assert list(got) == ["layer.3.weight"] and (got["layer.3.weight"] == gens[0]["layer.3.weight"]).all()
    whole = wtxt.load_file(path, rev="HEAD~1")
    assert sorted(whole) == sorted(gens[0]) and all((whole[k] == v).all() for k, v in gens[0].items())
    with pytest.raises(wtxt.Error, match="no tensor named"):
        wtxt.load_file(path, rev="HEAD~1", names=["absent"])


def test_load_file_names_of_a_split_snapshot_opens_only_the_parts_that_hold_them(tmp_path):
    """In the tree form, `load_file(names=[...])` of a split snapshot reads
    the parts that hold those tensors alone: with every other part
    overwritten by other bytes of its size it gives the whole load's bytes;
    a part gone, of its own or not, fails (each part is checked unread)."""
    rng = np.random.default_rng(4)
    arrays = {f"t{i}": rng.standard_normal((256, 64)).astype(np.float32) for i in range(6)}
    path = tmp_path / "m.wtxt"
    wtxt.save_file(arrays, path, digest="tree", part_size="64K")
    whole = wtxt.load_file(path)
    parts = sorted((tmp_path / "m.wtxt.parts").iterdir())
    holding = [p for p in parts if b"name=t3 " in p.read_bytes()]
    assert holding and len(holding) + 2 <= len(parts)
    others = [p for p in parts if p not in holding]
    for p in others:
        p.write_bytes(b"x" * p.stat().st_size)
    got = wtxt.load_file(path, names=["t3"])
    assert list(got) == ["t3"] and (got["t3"] == whole["t3"]).all()
    with pytest.raises(wtxt.Error):
        wtxt.load_file(path, names=["t4"])
    others[-1].unlink()
    with pytest.raises(wtxt.VerifyError, match="missing part"):
        wtxt.load_file(path, names=["t3"])
    holding[-1].unlink()
    with pytest.raises(wtxt.Error):
        wtxt.load_file(path, names=["t3"])


def test_every_loader_holds_the_repositorys_signing_policy(tmp_path):
    """In a repository whose `wtxt git install --trusted-keys` set its
    policy, a load that names no key is held to it, as `wtxt verify` is:
    load_file, by revision too, verify, restore_checkpoint(rev=) refuse an
    unsigned or foreign-signed snapshot; naming keys decides instead."""
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@e")
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    keys = FIXTURES / "keys"
    arrays = {"w": np.arange(12, dtype="f4").reshape(3, 4)}
    wtxt.save_file(arrays, repo / "m.wtxt", sign_key=keys / "other.pem")  # a key the repository does not trust
    subprocess.run(["git", "add", "m.wtxt"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "g0"], cwd=repo, check=True, env=env)
    subprocess.run([CLI, "git", "install", "--trusted-keys", str(keys / "trusted_keys")], cwd=repo, check=True,
                   capture_output=True)
    with pytest.raises(wtxt.VerifyError, match="signature"):
        wtxt.load_file(repo / "m.wtxt")
    with pytest.raises(wtxt.VerifyError, match="signature"):
        wtxt.load_file(repo / "m.wtxt", rev="HEAD", names=["w"])
    assert not wtxt.verify(repo / "m.wtxt").ok
    # Outside the repository, or naming the keys, the caller decides.
    shutil.copy(repo / "m.wtxt", tmp_path / "copy.wtxt")
    assert (wtxt.load_file(tmp_path / "copy.wtxt")["w"] == arrays["w"]).all()
    other = wtxt.load_file(repo / "m.wtxt", trusted_keys=keys / "other.pem.pub")
    assert (other["w"] == arrays["w"]).all()
    # A signed generation by a trusted key loads; an unsigned one is refused.
    wtxt.save_file(arrays, repo / "m.wtxt", sign_key=keys / "sign.pem")
    assert (wtxt.load_file(repo / "m.wtxt")["w"] == arrays["w"]).all()
    wtxt.save_file(arrays, repo / "m.wtxt")
    with pytest.raises(wtxt.VerifyError, match="signature required"):
        wtxt.load_file(repo / "m.wtxt")
    pytest.importorskip("torch")
    from wtxt.checkpoint import restore_checkpoint
    with pytest.raises(wtxt.VerifyError, match=r"HEAD:.*signature"):
        restore_checkpoint(repo / "m.wtxt", tmp_path / "out", rev="HEAD")
    assert not (tmp_path / "out").exists()


def test_the_markdown_review_puts_the_largest_movers_first_by_group_with_the_step(tmp_path):
    """A checkpoint's review: the step and epoch in the summary; the
    tensors grouped by what holds them (the model's file, the optimizer's),
    each group ordered by relative change, its largest movers shown however
    many changed; the rest counted."""
    rng = np.random.default_rng(3)
    old = {f"model.safetensors/layer.{i:02}.weight": rng.standard_normal(64).astype("f4") for i in range(80)}
    old.update({f"optimizer.pt/state.{i}.exp_avg": rng.standard_normal(64).astype("f4") for i in range(4)})
    new = {k: v.copy() for k, v in old.items()}
    for i, k in enumerate(sorted(new)):
        new[k][: 1 + i % 7] += np.float32(1e-3 * (1 + i))  # every tensor moves, each by its own amount
    new["model.safetensors/layer.00.weight"] += np.float32(5.0)  # the largest mover (relative L2 0.99)
    new["model.safetensors/layer.77.weight"] *= np.float32(3.0)  # the second (0.67), near the last by name
    wtxt.save_file(old, tmp_path / "a.wtxt", metadata={"global_step": "2", "epoch": "0.5"}, gen=0)
    wtxt.save_file(new, tmp_path / "b.wtxt", metadata={"global_step": "4", "epoch": "1.0"},
                   prev=tmp_path / "a.wtxt")
    md = subprocess.run([CLI, "diff", str(tmp_path / "a.wtxt"), str(tmp_path / "b.wtxt"), "--format", "markdown"],
                        capture_output=True, text=True).stdout
    assert "| step | 2 | 4 |" in md and "| epoch | 0.5 | 1.0 |" in md, md
    model, optim = md.index("**`model.safetensors`**: 80 changed"), md.index("**`optimizer.pt`**: 4 changed")
    rows = [line for line in md[model:optim].splitlines() if line.startswith("| `")]
    assert rows[0].startswith("| `model.safetensors/layer.00.weight`"), rows[:3]
    assert rows[1].startswith("| `model.safetensors/layer.77.weight`"), rows[:3]
    assert "more changed tensor(s), each moved less" in md[model:optim]
    assert md[optim:].count("| `optimizer.pt/state.") == 4, md[optim:]
