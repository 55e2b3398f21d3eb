"""`netdp node` hosting several identities, `netdp demo --workers`: the flags and what each hosted
node gets from them (netdp_node.host). No process is started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netdp_node import cli, demo
from netdp_node.errors import ConfigError
from netdp_node.host import identity_folders, node_configs, write_port_file
from netdp_node.security import pki


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    pki.init_ca(d)
    pki.issue(d, "operator", role="operator", hosts=())
    pki.issue(d, "bootstrap", role="bootstrap", hosts=("127.0.0.1",))
    for i in (1, 2, 10):
        pki.issue(d, f"node-{i}", hosts=("127.0.0.1",))
    return d


def _configs(argv: list[str]) -> list:
    return cli._hosted_configs(cli.build_parser().parse_args(argv))


def test_one_identity_keeps_the_single_node_meaning(ca: Path, tmp_path: Path) -> None:
    data = tmp_path / "v.txt"
    data.write_text("0.5\n")
    [cfg] = _configs(
        [
            "node",
            "--certs",
            str(ca / "node-1"),
            "--bootstrap",
            "127.0.0.1:7600",
            "--ledger",
            str(tmp_path / "led"),
            "--listen",
            "127.0.0.1:9000",
            "--data",
            str(data),
            "--seed",
            "7",
        ]
    )
    assert cfg.certs == ca / "node-1"
    assert cfg.ledger == tmp_path / "led"  # the ledger folder itself, not LEDGER/node-1
    assert cfg.listen == "127.0.0.1:9000" and cfg.seed == 7 and cfg.data == data


def test_repeated_certs_give_each_node_its_own_ledger_port_data_seed(
    ca: Path, tmp_path: Path
) -> None:
    vals = tmp_path / "data"
    vals.mkdir()
    for nid in ("node-2", "node-10"):
        (vals / f"{nid}.txt").write_text("1\n")
    cfgs = _configs(
        [
            "node",
            "--certs",
            str(ca / "node-2"),
            "--certs",
            str(ca / "node-10"),
            "--bootstrap",
            "127.0.0.1:7600",
            "--ledger",
            str(tmp_path / "ledgers"),
            "--listen",
            "127.0.0.1:9000",
            "--advertise",
            "10.0.0.1:7000",
            "--data",
            str(vals),
            "--seed",
            "100",
            "--fault-drop",
            "0.1",
            "--fault-seed",
            "5",
            "--budget-epsilon",
            "3",
        ]
    )
    assert [c.certs for c in cfgs] == [ca / "node-2", ca / "node-10"]
    assert [c.ledger for c in cfgs] == [
        tmp_path / "ledgers" / "node-2",
        tmp_path / "ledgers" / "node-10",
    ]
    assert [c.listen for c in cfgs] == ["127.0.0.1:9000", "127.0.0.1:9001"]
    assert [c.advertise for c in cfgs] == ["10.0.0.1:7000", "10.0.0.1:7001"]
    assert [c.data for c in cfgs] == [vals / "node-2.txt", vals / "node-10.txt"]
    assert [c.seed for c in cfgs] == [100, 101]
    assert [c.faults.seed for c in cfgs] == [5, 6]
    assert all(c.faults.drop_prob == 0.1 and c.budget_epsilon == 3 for c in cfgs)


def test_port_zero_stays_any_port_for_every_node(ca: Path, tmp_path: Path) -> None:
    cfgs = _configs(
        [
            "node",
            "--certs",
            str(ca / "node-1"),
            "--certs",
            str(ca / "node-2"),
            "--bootstrap",
            "127.0.0.1:7600",
            "--ledger",
            str(tmp_path),
        ]
    )
    assert [c.listen for c in cfgs] == ["127.0.0.1:0", "127.0.0.1:0"]
    assert all(c.seed is None and c.data is None for c in cfgs)


def test_identities_takes_the_node_folders_of_a_ca_dir_in_natural_order(ca: Path) -> None:
    # operator and bootstrap are skipped; node-10 after node-2
    assert [p.name for p in identity_folders([], [str(ca)])] == ["node-1", "node-2", "node-10"]
    cfgs = _configs(
        ["node", "--identities", str(ca), "--bootstrap", "127.0.0.1:7600", "--ledger", "/tmp/x"]
    )
    assert [c.ledger.name for c in cfgs] == ["node-1", "node-2", "node-10"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--certs", "{ca}/node-1", "--certs", "{ca}/node-1"], "node-1 is given twice"),
        (["--identities", "{ca}", "--certs", "{ca}/node-2"], "node-2 is given twice"),
        (["--identities", "{tmp}"], "no node identity folder"),
        (["--identities", "{tmp}/nope"], "not a folder"),
        (
            ["--certs", "{ca}/node-1", "--certs", "{ca}/node-2", "--data", "{tmp}/v.txt"],
            "names a folder",
        ),
        (
            ["--certs", "{ca}/node-1", "--certs", "{ca}/node-2", "--data", "{tmp}"],
            "no node-1.txt or node-1.npy",
        ),
        (
            ["--certs", "{ca}/node-1", "--certs", "{ca}/node-2", "--listen", "127.0.0.1:65535"],
            "above 65535",
        ),
        ([], "give --certs DIR"),
    ],
)
def test_bad_hosting_flags_are_config_errors(
    ca: Path, tmp_path: Path, argv: list[str], says: str
) -> None:
    (tmp_path / "v.txt").write_text("1\n")
    argv = [x.format(ca=ca, tmp=tmp_path) for x in argv]
    with pytest.raises(ConfigError, match=says):
        _configs(["node", *argv, "--bootstrap", "127.0.0.1:7600", "--ledger", str(tmp_path / "l")])


def test_node_check_with_several_identities_exits_0_and_names_each(
    ca: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            "node",
            "--identities",
            str(ca),
            "--bootstrap",
            "127.0.0.1:7600",
            "--ledger",
            str(tmp_path),
            "--check",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0
    for nid in ("node-1", "node-2", "node-10"):
        assert str(tmp_path / nid) in err
    assert "3 nodes in one process" in err


def test_bad_hosting_flag_from_the_command_line_exits_2(
    ca: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            "node",
            "--certs",
            str(ca / "node-1"),
            "--certs",
            str(ca / "node-1"),
            "--bootstrap",
            "127.0.0.1:7600",
            "--ledger",
            str(tmp_path),
        ]
    )
    assert code == 2
    assert "node-1 is given twice" in capsys.readouterr().err


def test_port_file_one_node_a_number_several_a_json_object(tmp_path: Path) -> None:
    write_port_file(tmp_path / "one", {"node-1": 4242})
    assert (tmp_path / "one").read_text() == "4242"
    write_port_file(tmp_path / "many", {"node-1": 4242, "node-2": 4243})
    assert json.loads((tmp_path / "many").read_text()) == {"node-1": 4242, "node-2": 4243}


def test_demo_workers_flag() -> None:
    p = cli.build_parser()
    assert p.parse_args(["demo"]).workers is None  # run_demo: one per core
    assert p.parse_args(["demo", "--workers", "3"]).workers == 3
    assert demo.default_workers() >= 1


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--workers", "0", "--nodes", "65"], "between 3 and 64 with --workers 0"),
        (["--workers", "2", "--nodes", "2001"], "between 3 and 2000"),
        (["--workers", "-1"], "--workers must be >= 0"),
    ],
)
def test_demo_node_count_limits_depend_on_workers(argv: list[str], says: str) -> None:
    a = cli.build_parser().parse_args(["demo", *argv])
    with pytest.raises(ConfigError, match=says):
        demo.run_demo(a)


def test_node_configs_rejects_nothing_for_one_folder(ca: Path, tmp_path: Path) -> None:
    base = cli._node_config(
        cli.build_parser().parse_args(
            [
                "node",
                "--certs",
                str(ca / "node-1"),
                "--bootstrap",
                "127.0.0.1:1",
                "--ledger",
                str(tmp_path),
            ]
        )
    )
    [cfg] = node_configs(base, [ca / "node-2"])
    assert cfg.certs == ca / "node-2" and cfg.ledger == tmp_path


def test_packing_splits_where_seeds_are_not_consecutive() -> None:
    from netdp_node.cluster import _runs

    seeds = {f"n{i}": 1000 + i for i in range(8)}
    # n2 and n5 run alone (fault flags): the packed ones are n0 n1 n3 n4 n6 n7
    assert _runs(["n0", "n1", "n3", "n4", "n6", "n7"], seeds) == [
        ["n0", "n1"],
        ["n3", "n4"],
        ["n6", "n7"],
    ]
    assert _runs(["n0", "n1", "n2"], seeds) == [["n0", "n1", "n2"]]


def test_settle_heap_takes_start_up_objects_out_of_the_collectors_scans() -> None:
    """After start-up the host freezes what it made: the collector's full collections no longer scan
    it (a frozen object is in no generation), and garbage made before is collected, not frozen;
    it collects less often from then on (NODE_GC_THRESHOLDS)."""
    import gc
    import weakref

    from netdp_node.host import NODE_GC_THRESHOLDS, settle_heap

    class Node:
        pass

    kept = Node()
    kept.me = kept  # a cycle: tracked by the collector
    garbage = Node()
    garbage.me = garbage
    gone = weakref.ref(garbage)
    del garbage
    assert any(o is kept for o in gc.get_objects())
    thresholds = gc.get_threshold()
    try:
        settle_heap()
        assert gone() is None  # collected before the freeze
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # frozen: outside every generation
        assert gc.get_threshold() == NODE_GC_THRESHOLDS != thresholds
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    assert any(o is kept for o in gc.get_objects())


def test_ledger_threads_default_to_the_event_loop_for_one_node_and_for_several(
    ca: Path, tmp_path: Path
) -> None:
    """Nodes commit on their event loop by default, hosted or not (no thread hand-off on a
    token's path); --ledger-threads N gives every node of the process the pool of N."""
    base = ["node", "--bootstrap", "127.0.0.1:7600", "--ledger", str(tmp_path / "led")]
    [one] = _configs([*base, "--certs", str(ca / "node-1")])
    two = _configs([*base, "--certs", str(ca / "node-1"), "--certs", str(ca / "node-2")])
    assert one.ledger_threads == 0 and [c.ledger_threads for c in two] == [0, 0]
    given = _configs(
        [
            *base,
            "--certs",
            str(ca / "node-1"),
            "--certs",
            str(ca / "node-2"),
            "--ledger-threads",
            "2",
        ]
    )
    assert [c.ledger_threads for c in given] == [2, 2]
