"""`wtxt.torch.dcp` with real `torch.distributed` (gloo on 127.0.0.1, CPU,
1 to 3 processes): one snapshot whatever the world size, byte for byte what
`wtxt.torch.save_state_dict` writes for the full state; loads that reshard;
and nothing loaded, nothing left behind, when something is wrong."""
import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.checkpoint")

import dcp_workers as w  # noqa: E402

import wtxt  # noqa: E402
import wtxt.torch as wt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
KEYS = ROOT / "fixtures" / "wtxt" / "keys"
CLI = os.environ.get("WTXT_BIN") or str(ROOT / "target" / "debug" / "wtxt")
# A small part size, so that these states are split snapshots.
OPTS = {"ts": "2026-01-01T00:00:00Z", "part_size": "64K", "digest": "sha256"}


def files(head: pathlib.Path):
    """The snapshot's files (head, then parts) as {name: bytes}."""
    out = {head.name: head.read_bytes()}
    parts = head.parent / (head.name + ".parts")
    for p in sorted(parts.iterdir()) if parts.is_dir() else []:
        out[p.name] = p.read_bytes()
    return out


def leftovers(folder: pathlib.Path):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".stage") or p.name.endswith(".tmp"))


@pytest.mark.parametrize("digest", ["sha256", "tree"])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_one_snapshot_whatever_the_world_size(tmp_path, world, digest):
    opts = dict(OPTS, sign_key=str(KEYS / "sign.pem"), hmac_key=str(KEYS / "hmac.hex"), metadata={"run": "a"},
                digest=digest)
    ref = tmp_path / "ref" / "model.wtxt"
    ref.parent.mkdir()
    wt.save_state_dict(w.training_state(), ref, **opts)
    out = tmp_path / "dcp" / "model.wtxt"
    w.run(world, w.save_sharded, str(out), opts)
    got, want = files(out), files(ref)
    assert len(want) > 2  # a head and several parts
    assert got == want
    assert leftovers(out.parent) == []
    r = subprocess.run([CLI, "verify", out, "--hmac-key", KEYS / "hmac.hex", "--pubkey", KEYS / "sign.pem.pub",
                        "--require-signature"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("threads", ["1", "4"])
def test_one_rank_writes_the_same_snapshot_at_any_threads_of_work(tmp_path, monkeypatch, threads):
    """One rank hashes beside its encoding from two threads of work, after
    it at one, and from four the serial streams run alone: the same bytes."""
    monkeypatch.setenv("WTXT_THREADS", threads)
    opts = dict(OPTS, hmac_key=str(KEYS / "hmac.hex"))
    ref = tmp_path / "ref" / "model.wtxt"
    ref.parent.mkdir()
    wt.save_state_dict(w.training_state(), ref, **opts)
    out = tmp_path / "dcp" / "model.wtxt"
    w.run(1, w.save_sharded, str(out), opts)
    assert files(out) == files(ref)


def _check_loaded(out_dir: pathlib.Path, world: int):
    full = w.training_state()
    for rank in range(world):
        got = torch.load(out_dir / f"rank{rank}.pt", weights_only=False)
        assert got["optim"] == full["optim"]
        assert type(got["optim"]["betas"]) is tuple
        for k, v in full["model"].items():
            assert got["model"][k].dtype == v.dtype and torch.equal(got["model"][k], v), k


def test_saved_on_two_ranks_loads_on_three_and_on_one(tmp_path):
    snap = tmp_path / "model.wtxt"
    w.run(2, w.save_sharded, str(snap), OPTS)
    for world in (3, 1):
        out = tmp_path / f"load{world}"
        out.mkdir()
        w.run(world, w.load_sharded, str(snap), {}, str(out))
        _check_loaded(out, world)


@pytest.mark.parametrize("digest", ["sha256", "tree"])
def test_a_rank_that_loads_keeps_its_share_of_the_rows(tmp_path, digest):
    """Every rank holds only the rows its shards span (of the first
    dimension): its share, not the model. In the 1.1 form it verifies every
    byte; in the tree form it decodes only the chunks of its share."""
    import json

    snap = tmp_path / "model.wtxt"
    w.run(2, w.save_sharded, str(snap), dict(OPTS, digest=digest))
    out = tmp_path / "load"
    out.mkdir()
    w.run(3, w.load_sharded_keeping, str(snap), str(out))
    _check_loaded(out, 3)
    kept = [json.loads((out / f"rank{r}.kept.json").read_text()) for r in range(3)]
    full = w.training_state()["model"]
    for name, dim in w.SHARDED.items():
        rows = [k[f"model.{name}"][0] for k in kept]
        if dim == 0:
            # Row shards: each rank holds its own rows; together, the tensor once.
            assert sum(rows) == full[name].shape[0] and max(rows) < full[name].shape[0], (name, rows)
        else:
            assert rows == [full[name].shape[0]] * 3, (name, rows)
    assert all(k["model.count"] == [] for k in kept)  # a 0-dim tensor: whole


@pytest.mark.parametrize("digest", ["sha256", "tree"])
def test_in_place_a_rank_decodes_its_rows_into_the_state_dict(tmp_path, digest):
    """With `in_place=True` the row shards a rank reads whole past the first
    dimension (f32, bf16, f64, bool) are decoded straight into its tensors,
    never returned to be copied; the others (a column shard, a scalar) are
    copied as before; the state is the same. Damage in a
    part a rank decodes still fails the load naming that part."""
    import json

    snap = tmp_path / "model.wtxt"
    w.run(2, w.save_sharded, str(snap), dict(OPTS, digest=digest))
    out = tmp_path / "load"
    out.mkdir()
    w.run(3, w.load_sharded_keeping, str(snap), str(out), {"in_place": True})
    _check_loaded(out, 3)
    full = w.training_state()["model"]
    for r in range(3):
        placed = json.loads((out / f"rank{r}.placed.json").read_text())
        kept = json.loads((out / f"rank{r}.kept.json").read_text())
        rows = {k: v for k, v in w.SHARDED.items() if v == 0}
        assert set(placed) == {f"model.{k}" for k in rows}, placed
        assert set(kept) == {"model.norm.scale", "model.count"}, kept
        for k in rows:
            assert placed[f"model.{k}"][1:] == list(full[k].shape[1:])
    part = sorted((tmp_path / "model.wtxt.parts").iterdir())[1]
    b = bytearray(part.read_bytes())
    at = b.index(b"endch") - 10
    b[at] = ord("A") if b[at] != ord("A") else ord("B")
    part.write_bytes(bytes(b))
    with pytest.raises(AssertionError, match=part.name):
        w.run(2, w.load_sharded_keeping, str(snap), str(out), {"in_place": True})


def test_a_share_of_the_tree_form_is_proven_without_the_rest(tmp_path):
    """In the tree form a load of some rows decodes only their chunks: damage
    elsewhere is not its concern, damage in them is refused naming the part,
    and a chunk's claimed digest is bound to the root all the same."""
    from wtxt.torch import _load

    # 4 chunks of 128 rows (512 KiB each), a part each: far more than a
    # reader reads ahead.
    w_ = torch.arange(512 * 1024, dtype=torch.float32).reshape(512, 1024)
    snap = tmp_path / "model.wtxt"
    wt.save_state_dict({"w": w_, "b": torch.ones(1000)}, snap, **{**OPTS, "part_size": "1M", "digest": "tree"})
    parts = sorted((tmp_path / "model.wtxt.parts").iterdir())
    assert len(parts) > 2

    def flip(line: bytes, at: int) -> bytes:
        """`line` with the character at `at` changed (a base64 or hex digit stays one)."""
        return line[:at] + (b"a" if line[at:at + 1] != b"a" else b"b") + line[at + 1:]

    def damage(ix, in_ch=False):
        """Changes chunk `ix` of `w`: its first base64 line's first character,
        or the last digit of its `ch` line's `sha256`."""
        for p in parts:
            lines = p.read_bytes().split(b"\n")
            for k, line in enumerate(lines):
                if line.startswith(b"ch ix=%06d " % ix) and b"len=524288" in line:
                    if in_ch:
                        lines[k] = flip(line, line.index(b"sha256=") + 7 + 63)
                    else:
                        lines[k + 1] = flip(lines[k + 1], 0)
                    p.write_bytes(b"\n".join(lines))
                    return p
        raise AssertionError(f"no chunk {ix}")

    good = {p: p.read_bytes() for p in parts}

    def read_by(load) -> int:
        """Bytes this process reads from files while `load` runs."""
        def rchar() -> int:
            io = pathlib.Path("/proc/self/io").read_text()
            return int(next(l for l in io.splitlines() if l.startswith("rchar:")).split()[1])
        before = rchar()
        load()
        return rchar() - before

    # The chunks not kept are passed over unread; a whole load reads them all.
    text = sum(len(b) for b in good.values())
    share = read_by(lambda: _load(snap, None, None, None, None, rows={"w": (0, 128)}))
    assert share < text // 2, (share, text)
    assert read_by(lambda: wt.load_state_dict(snap)) >= text
    bad = damage(3)
    got, _, _ = _load(snap, None, None, None, None, rows={"w": (0, 128)})
    assert set(got) == {"w"} and torch.equal(got["w"], w_[:128])
    with pytest.raises(wtxt.Error, match='no tensor named "absent"'):
        _load(snap, None, None, None, None, rows={"w": (0, 128), "absent": (0, 1)})
    with pytest.raises(wtxt.VerifyError):
        wt.load_state_dict(snap)
    with pytest.raises(wtxt.VerifyError, match=bad.name):
        _load(snap, None, None, None, None, rows={"w": (300, 400)})
    bad.write_bytes(good[bad])
    damage(2, in_ch=True)
    with pytest.raises(wtxt.VerifyError):
        _load(snap, None, None, None, None, rows={"w": (0, 128)})


def test_fsdp2_with_adamw_saved_on_two_ranks_loads_on_three(tmp_path):
    snap, ref = tmp_path / "dcp" / "model.wtxt", tmp_path / "ref" / "model.wtxt"
    ref.parent.mkdir()
    w.run(2, w.fsdp_train_save, str(snap), str(ref), OPTS)
    assert files(snap) == files(ref)
    names = wt.load_state_dict(snap)
    assert "optim.state.0.weight.exp_avg" in names and names["optim.param_groups.0.lr"] == 0.01, sorted(names)
    w.run(3, w.fsdp_load, str(snap), str(tmp_path))
    loaded = torch.load(tmp_path / "loaded.pt", weights_only=False)
    flat = wt._flat(loaded)
    for k, v in names.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(flat[k], v), k
        else:
            assert flat[k] == v, k


def test_async_save_writes_the_same_snapshot(tmp_path):
    ref = tmp_path / "ref" / "model.wtxt"
    ref.parent.mkdir()
    wt.save_state_dict(w.training_state(), ref, **OPTS)
    snap = tmp_path / "dcp" / "model.wtxt"
    w.run(2, w.save_sharded, str(snap), OPTS, True)
    assert files(snap) == files(ref)


def test_a_chain_of_generations_from_ranks(tmp_path):
    g1, g2 = tmp_path / "g1" / "model.wtxt", tmp_path / "g2" / "model.wtxt"
    w.run(2, w.save_sharded, str(g1), OPTS)
    ec = tmp_path / "ec.pem"
    subprocess.run([CLI, "keygen", "-o", ec, "--type", "p256"], check=True, capture_output=True)
    opts = dict(OPTS, prev=str(g1), sign_key=str(KEYS / "sign.pem"), oms_key=str(ec))
    w.run(3, w.save_sharded, str(g2), opts)
    # In a folder of the same name: OMS names the model after its folder.
    ref = tmp_path / "ref" / "g2" / "model.wtxt"
    ref.parent.mkdir(parents=True)
    wt.save_state_dict(w.training_state(), ref, **opts)
    assert files(g2) == files(ref)
    r = wtxt.verify(g2, prev=g1, pubkey=KEYS / "sign.pem.pub", require_signature=True)
    assert r.ok and r.gen == 1 and r.signature == "valid", r.errors
    # The coordinator's OMS signature over the head and parts the ranks wrote.
    assert (g2.parent / "model.sig").read_bytes() == (ref.parent / "model.sig").read_bytes()
    r = subprocess.run([CLI, "verify", g2, "--oms-pubkey", f"{ec}.pub"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("fault", ["damaged", "missing", "foreign"])
def test_a_bad_part_fails_the_load_and_loads_nothing(tmp_path, fault):
    snap = tmp_path / "model.wtxt"
    w.run(2, w.save_sharded, str(snap), OPTS)
    part = sorted((tmp_path / "model.wtxt.parts").iterdir())[1]
    if fault == "damaged":
        b = bytearray(part.read_bytes())
        at = b.index(b"endch") - 10
        b[at] = ord("A") if b[at] != ord("A") else ord("B")
        part.write_bytes(bytes(b))
    elif fault == "missing":
        part.unlink()
    else:
        # The same part of a snapshot of other values: same size and framing.
        other = tmp_path / "other" / "model.wtxt"
        other.parent.mkdir()
        state = w.training_state(seed=5)
        wt.save_state_dict(state, other, **OPTS)
        part.write_bytes((other.parent / "model.wtxt.parts" / part.name).read_bytes())
    out = tmp_path / "load"
    out.mkdir()
    with pytest.raises(AssertionError) as e:
        w.run(2, w.load_sharded, str(snap), {}, str(out))
    assert part.name in str(e.value)
    for rank in range(2):
        got = torch.load(out / f"rank{rank}.pt", weights_only=False)
        assert all(not v.any() for v in got["model"].values())  # still the zeros it started with


def test_trust_options_are_enforced_on_load(tmp_path):
    snap = tmp_path / "model.wtxt"
    w.run(2, w.save_sharded, str(snap), OPTS)  # unsigned
    out = tmp_path / "load"
    out.mkdir()
    with pytest.raises(AssertionError, match="signature"):
        w.run(2, w.load_sharded, str(snap), {"pubkey": str(KEYS / "sign.pem.pub"), "require_signature": True},
              str(out))


def test_in_place_the_signature_policy_is_decided_before_any_row_is_written(tmp_path):
    """With `in_place=True` a snapshot the signature policy refuses (not
    signed, or signed by a key that is not trusted) is refused from its
    head: the state dict's tensors keep the zeros they started with."""
    pub = str(KEYS / "sign.pem.pub")
    for name, sign in (("unsigned", {}), ("foreign", {"sign_key": str(KEYS / "other.pem")})):
        snap = tmp_path / f"{name}.wtxt"
        w.run(2, w.save_sharded, str(snap), dict(OPTS, **sign))
        out = tmp_path / f"load-{name}"
        out.mkdir()
        with pytest.raises(AssertionError, match=r"line \d+: (signature required|signed by keyid)"):
            w.run(2, w.load_sharded_keeping, str(snap), str(out),
                  {"in_place": True, "pubkey": pub, "require_signature": True})
        for rank in range(2):
            got = torch.load(out / f"rank{rank}.pt", weights_only=False)
            assert all(not v.any() for v in got["model"].values()), name


def test_a_failed_save_leaves_nothing_and_the_next_one_succeeds(tmp_path):
    snap = tmp_path / "model.wtxt"
    with pytest.raises(AssertionError, match="complex32"):
        w.run(2, w.save_bad_dtype, str(snap))
    assert not snap.exists() and leftovers(tmp_path) == []
    # Every rank hears of a rank's failure and raises; none waits forever.
    with pytest.raises(AssertionError, match="(?s)rank 0:.*rank 1 failed.*No space left.*rank 1:"):
        w.run(2, w.save_failing_rank, str(snap), "error")
    assert not snap.exists()
    with pytest.raises(AssertionError, match="exit code 3"):
        w.run(2, w.save_failing_rank, str(snap), "exit")
    assert not snap.exists()
    w.run(2, w.save_sharded, str(snap), OPTS)
    assert wtxt.verify(snap).ok and leftovers(tmp_path) == []


def test_the_reader_refuses_what_is_not_a_snapshot(tmp_path):
    from wtxt.torch.dcp import WtxtStorageReader, WtxtStorageWriter

    other = tmp_path / "model.wtxt"
    other.write_text("not a snapshot\n")
    assert not WtxtStorageReader.validate_checkpoint_id(other)
    assert not WtxtStorageReader.validate_checkpoint_id(tmp_path)
    assert WtxtStorageWriter.validate_checkpoint_id(tmp_path / "x.wtxt")
    with pytest.raises(wtxt.Error, match="WTXT"):
        WtxtStorageReader(other).read_metadata()


def test_chunks_go_to_the_rank_holding_most_of_them():
    from wtxt import _rust

    # 301 rows of 96 bytes in chunks of 128 rows, rows 0..150 on rank 0.
    p = _rust.plan_tensor("f32", [301, 24], [(0, [0, 0], [151, 24]), (1, [151, 0], [150, 24])])
    assert p.chunks == [(0, 128 * 96), (128 * 96, 128 * 96), (256 * 96, 45 * 96)]
    assert p.owners == [0, 1, 1] and p.held == [True, False, True]
    # Sharded along columns, every chunk is half on each: long runs all the
    # same, and none held whole (each is assembled in the stage).
    p = _rust.plan_tensor("f32", [301, 24], [(0, [0, 0], [301, 12]), (1, [0, 12], [301, 12])])
    assert p.owners == [0, 0, 1] and p.held == [False, False, False]
    with pytest.raises(_rust.WtxtError, match="dimensions"):
        _rust.plan_tensor("f32", [301, 24], [(0, [0], [301, 24])])


def test_state_dicts_with_other_values_round_trip_in_one_process(tmp_path):
    f = tmp_path / "m.wtxt"
    state = w.training_state()
    wt.save_state_dict(state, f)
    back = wt.load_state_dict(f)
    assert back["optim.betas"] == (0.9, 0.999) and back["optim.fused"] is None and back["optim.step"] == 3
    assert torch.equal(back["model.layers.0.weight"], state["model"]["layers.0.weight"])
    with pytest.raises(wtxt.Error, match="'bad'.*object"):
        wt.save_state_dict({"bad": object()}, tmp_path / "x.wtxt")
    with pytest.raises(wtxt.Error, match="nan"):
        wt.save_state_dict({"x": float("nan")}, tmp_path / "x.wtxt")


def _git(*args, cwd):
    return subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_the_coordinator_commits_and_pushes_each_generation(tmp_path):
    import json

    work, remote = tmp_path / "work", tmp_path / "remote.git"
    _git("init", "-q", work, cwd=tmp_path)
    _git("init", "-q", "--bare", remote, cwd=tmp_path)
    snap = work / "ckpt" / "model.wtxt"
    report = tmp_path / "info.json"
    w.run(2, w.save_and_commit, str(snap), dict(OPTS, remote=str(remote)), str(report))
    first = json.loads(report.read_text())
    assert first["gen"] == 0 and first["pushed"] and len(first["commit"]) == 40
    # The next generation chains from the committed one (a copy, since the
    # snapshot is rewritten in place).
    prev = tmp_path / "prev"
    prev.mkdir()
    subprocess.run(["cp", "-r", snap, snap.parent / "model.wtxt.parts", prev], check=True)
    w.run(3, w.save_and_commit, str(snap), dict(OPTS, remote=str(remote), prev=str(prev / "model.wtxt")),
          str(report))
    second = json.loads(report.read_text())
    assert second["gen"] == 1 and second["pushed"]
    log = _git("log", "--format=%H %s", cwd=remote).splitlines()
    assert [l.split()[0] for l in log] == [second["commit"], first["commit"]]
    assert "gen=000001" in log[0]
    files = _git("ls-tree", "-r", "--name-only", second["commit"], cwd=remote).split()
    assert "ckpt/model.wtxt" in files and any(f.startswith("ckpt/model.wtxt.parts/") for f in files)
    _git("checkout", "-q", "--", ".", cwd=work)
    assert _git("status", "--porcelain", cwd=work) == ""
    r = subprocess.run([CLI, "verify", snap, "--prev", prev / "model.wtxt"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_named_key_requires_its_signature(tmp_path):
    """Issue 50.9: `pubkey=` (or `trusted_keys=`) alone protects: an
    unsigned snapshot or one signed by another key is refused by every
    loader; `require_signature=False` is the explicit opt-out."""
    snap = tmp_path / "model.wtxt"
    w.run(2, w.save_sharded, str(snap), OPTS)  # unsigned
    pub = str(KEYS / "sign.pem.pub")
    out = tmp_path / "load"
    out.mkdir()
    with pytest.raises(AssertionError, match="signature"):
        w.run(2, w.load_sharded, str(snap), {"pubkey": pub}, str(out))
    for load in (wtxt.load_file, wt.load_state_dict):
        with pytest.raises(wtxt.VerifyError, match="signature"):
            load(snap, pubkey=pub)
        assert load(snap, pubkey=pub, require_signature=False)
    other = tmp_path / "other.pem"
    subprocess.run([CLI, "keygen", "-o", other], check=True, capture_output=True)
    signed = tmp_path / "signed.wtxt"
    wt.save_state_dict(w.training_state(), signed, sign_key=other)
    with pytest.raises(wtxt.VerifyError, match="signature"):
        wtxt.load_file(signed, pubkey=pub)
    with pytest.raises(wtxt.VerifyError, match="signature"):
        wtxt.load_file(signed, trusted_keys=KEYS / "trusted_keys")
    # Another key's signature is refused even where none is required.
    with pytest.raises(wtxt.VerifyError, match="not among the trusted keys"):
        wtxt.load_file(signed, pubkey=pub, require_signature=False)
    # The .pub keygen writes is a trusted-keys file of one key.
    assert wtxt.load_file(signed, trusted_keys=str(other) + ".pub")
    assert not wtxt.verify(signed, pubkey=pub).ok
    wt.save_state_dict(w.training_state(), signed, sign_key=KEYS / "sign.pem")
    assert wtxt.load_file(signed, pubkey=pub)


def test_the_coordinator_commits_only_what_the_hook_would_accept(tmp_path):
    """Issue 50.12: without `prev=`, a commit continues HEAD's chain (never
    gen 0 again); a snapshot a rank lied about is neither installed nor
    signed nor committed."""
    import json

    work = tmp_path / "work"
    _git("init", "-q", work, cwd=tmp_path)
    snap = work / "model.wtxt"
    report = tmp_path / "info.json"
    opts = dict(OPTS, sign_key=str(KEYS / "sign.pem"))
    opts.pop("gen", None)
    w.run(2, w.save_and_commit, str(snap), opts, str(report))
    assert json.loads(report.read_text())["gen"] == 0
    w.run(2, w.save_and_commit, str(snap), opts, str(report))
    second = json.loads(report.read_text())
    assert second["gen"] == 1
    r = subprocess.run([CLI, "log", "model.wtxt", "--verify", "--pubkey", KEYS / "sign.pem.pub"], cwd=work,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # A gen that does not continue HEAD is not committed.
    with pytest.raises(AssertionError, match="does not continue HEAD"):
        w.run(2, w.save_and_commit, str(snap), dict(opts, gen=7), str(report))
    _git("checkout", "-q", "--", ".", cwd=work)
    before = files(snap)
    with pytest.raises(AssertionError, match="does not verify"):
        w.run(2, w.save_with_a_lying_rank, str(snap), dict(opts, commit=True))
    assert files(snap) == before, "the previous generation stays whole"
    assert _git("rev-list", "--count", "HEAD", cwd=work).strip() == "2"
    assert leftovers(work) == []


def test_in_the_tree_form_each_rank_checks_what_it_wrote_and_a_lie_is_caught(tmp_path):
    """Issue 68.4: in the tree form each rank reads back and checks the
    chunks it wrote, and the coordinator reads only the rest of the text: a
    rank whose read-back differs from what it reported writing, or whose
    reports agree but are not the digests its `ch` lines carry, fails the
    save, and the snapshot there stays as it was."""
    snap = tmp_path / "model.wtxt"
    opts = dict(OPTS, digest="tree")
    w.run(2, w.save_sharded, str(snap), opts)
    assert wtxt.verify(snap).ok
    before = files(snap)
    for lie, match in (("check_chunks", "not what it reported writing"),
                       ("write_chunks", "not what it reported writing"),
                       ("write_chunks+check_chunks", "does not verify")):
        with pytest.raises(AssertionError, match=match):
            w.run(2, w.save_with_a_lying_rank, str(snap), dict(opts, gen=1), lie)
        assert files(snap) == before, lie
    assert leftovers(tmp_path) == []


def test_ranks_that_read_two_generations_fill_nothing(tmp_path):
    """Issue 50.13: the ranks agree on one snapshot before any tensor is
    filled: one replaced between their reads fails the load everywhere."""
    a, b = tmp_path / "a" / "model.wtxt", tmp_path / "b" / "model.wtxt"
    w.run(2, w.save_sharded, str(a), OPTS)
    w.run(2, w.save_sharded, str(b), dict(OPTS, gen=5))
    out = tmp_path / "load"
    out.mkdir()
    with pytest.raises(AssertionError, match="different snapshots"):
        w.run(2, w.load_two_generations, str(a), str(b), str(out))
    for rank in range(2):
        got = torch.load(out / f"rank{rank}.pt", weights_only=False)
        assert all(not v.any() for v in got["model"].values())


def test_a_second_save_to_one_path_fails_and_the_first_stays_whole(tmp_path):
    """Issue 50.14: one save at a time writes a snapshot; one that finds
    another in progress fails before it touches anything."""
    import fcntl

    snap = tmp_path / "model.wtxt"
    w.run(2, w.save_sharded, str(snap), OPTS)
    before = files(snap)
    lock = tmp_path / ".model.wtxt.dcp.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(AssertionError, match="another save to this snapshot is in progress"):
            w.run(2, w.save_sharded, str(snap), dict(OPTS, gen=1))
    assert files(snap) == before and wtxt.verify(snap).ok
    w.run(2, w.save_sharded, str(snap), dict(OPTS, gen=1))
    assert wtxt.verify(snap).gen == 1 and not lock.exists() and leftovers(tmp_path) == []


def test_ranks_given_different_keys_fail_at_once_saying_which(tmp_path):
    """Issue 50.16: ranks with different `hmac_key`s fail with a message
    naming it, instead of waiting for gloo's timeout."""
    other = tmp_path / "other.hex"
    other.write_text("cd" * 32)
    snap = tmp_path / "model.wtxt"
    per_rank = [dict(OPTS, hmac_key=str(KEYS / "hmac.hex")), dict(OPTS, hmac_key=str(other))]
    with pytest.raises(AssertionError, match="different hmac_key"):
        w.run(2, w.save_with_rank_options, str(snap), per_rank)
    assert not snap.exists()


def test_the_tree_form_from_python_is_checked_independently(tmp_path):
    """Issue 53: `digest="tree"` from every Python writer; the file is what
    the CLI writes, and `tests/py/check_tree.py` (hashlib) recomputes it."""
    import numpy as np
    state = w.training_state()
    a = tmp_path / "a" / "m.wtxt"  # the folder is made
    wt.save_state_dict(state, a, hmac_key=KEYS / "hmac.hex", digest="tree", ts="2026-01-01T00:00:00Z")
    check = subprocess.run([sys.executable, ROOT / "tests" / "py" / "check_tree.py", a, "--hmac-key",
                            KEYS / "hmac.hex"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    back = wt.load_state_dict(a, hmac_key=KEYS / "hmac.hex")
    assert torch.equal(back["model.embed.weight"], state["model"]["embed.weight"])
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}
    b = tmp_path / "b.wtxt"
    wtxt.save_file(arrays, b, digest="tree", ts="2026-01-01T00:00:00Z")
    assert "digest_tree" in b.read_text().splitlines()[2]
    with pytest.raises(wtxt.Error, match="digest"):
        wtxt.save_file(arrays, b, digest="sha512")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", repo], check=True)
    with wtxt.Snapshotter(repo, path_in_repo="m.wtxt", digest="tree") as snap:
        snap.publish(arrays)
        assert snap.request_snapshot().result(timeout=60).commit
    assert "digest_tree" in (repo / "m.wtxt").read_text().splitlines()[2]
    assert wtxt.verify(repo / "m.wtxt").ok
    # The training integrations write the tree form unless told otherwise
    # (the Snapshotter, DCP's writer); save_file and save_state_dict keep 1.1.
    with wtxt.Snapshotter(repo, path_in_repo="d.wtxt") as snap:
        snap.publish(arrays)
        assert snap.request_snapshot().result(timeout=60).commit
    assert "digest_tree" in (repo / "d.wtxt").read_text().splitlines()[2]
    from wtxt.torch.dcp import WtxtStorageWriter
    assert WtxtStorageWriter(tmp_path / "dcp.wtxt").writing["digest"] == "tree"
    wtxt.save_file(arrays, b)
    assert "digest_tree" not in b.read_text().splitlines()[2]



def test_a_load_that_does_not_verify_raises_wtxt_errors(tmp_path):
    """torch wraps a rank's failure in CheckpointException (a BaseException,
    which `except Exception` misses); wtxt.torch.dcp.load raises the
    wtxt.VerifyError itself, with torch's exception as its cause."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from wtxt.torch.dcp import WtxtStorageReader, load

    snap = tmp_path / "model.wtxt"
    state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    wt.save_state_dict(state, snap)
    lines = snap.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("ch ")) + 1
    lines[at] = ("B" if lines[at][3] == "A" else "A").join([lines[at][:3], lines[at][4:]])
    snap.write_text("\n".join(lines))
    target = {"w": torch.zeros(2, 3)}
    with pytest.raises(CheckpointException):
        dcp.load(target, storage_reader=WtxtStorageReader(snap))
    with pytest.raises(wtxt.VerifyError) as e:
        load(target, WtxtStorageReader(snap))
    assert isinstance(e.value.__cause__, CheckpointException)
    assert torch.equal(target["w"], torch.zeros(2, 3)), "nothing copied from a snapshot that does not verify"
    wt.save_state_dict(state, snap)
    load(target, WtxtStorageReader(snap))
    assert torch.equal(target["w"], state["w"])


def test_a_refused_push_is_heard_in_the_save_that_made_it(tmp_path, caplog):
    """The coordinator's push is part of the save: refused by the host, it
    warns on the `wtxt` logger (the commit stays, the future says why), or
    with on_push_error="raise" fails the save."""
    import torch.distributed.checkpoint as dcp
    from wtxt.torch.dcp import WtxtStorageWriter

    work, remote = tmp_path / "work", tmp_path / "remote.git"
    _git("init", "-q", work, cwd=tmp_path)
    _git("init", "-q", "--bare", remote, cwd=tmp_path)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho refused by the host >&2\nexit 1\n")
    hook.chmod(0o755)
    state = {"w": torch.arange(6, dtype=torch.float32)}
    writer = WtxtStorageWriter(work / "model.wtxt", commit=True, remote=str(remote))
    with caplog.at_level("WARNING", logger="wtxt"):
        dcp.save(state, storage_writer=writer)
    assert any("refused by the host" in r.message for r in caplog.records), caplog.text
    with pytest.raises(wtxt.Error, match="not pushed"):
        writer.committed.result(timeout=60)
    strict = WtxtStorageWriter(work / "model.wtxt", commit=True, remote=str(remote), on_push_error="raise",
                               prev=None)
    with pytest.raises(BaseException, match="on_push_error='raise'"):
        dcp.save(state, storage_writer=strict)
    with pytest.raises(wtxt.Error, match="on_push_error must be one of"):
        WtxtStorageWriter(work / "model.wtxt", on_push_error="ignore")
