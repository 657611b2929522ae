"""`gputide place` on bad input files: one line naming the file, the field, the value and what is allowed; exit 2."""

from __future__ import annotations

import pytest

from balancer.cli import main

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,8,V100M16\nn1,32000,262144,2,T4\nn2,32000,262144,0,\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def _place(tmp_path, pods: str, *extra: str) -> int:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS + pods)
    return main(["place", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                 "--policy", "gputide", "--seeds", "1", *extra])


@pytest.mark.parametrize(
    ("row", "shown"),
    [("p0,1000,1000,1,-500,\n", "invalid value -500;"), ("p0,1000,1000,1.5,500,\n", "invalid value 1.5;"),
     ("p0,-1,1000,1,500,\n", "invalid value -1;")],
    ids=["negative gpu_milli", "fractional num_gpu", "negative cpu_milli"],
)
def test_a_numeric_cell_out_of_range_is_shown_as_written(tmp_path, capsys, row, shown):
    """The value is the cell as the file has it, not numpy's repr of it (`np.int64(-500)`)."""
    assert _place(tmp_path, row) == 2
    err = capsys.readouterr().err
    assert shown in err and "np." not in err and "row 2" in err and "pods.csv" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("rows", "field", "shown"),
    [
        ("p0,1000,1000,16,1000,\n", "'num_gpu': invalid value 16;", "at most 8, the most GPUs"),
        ("p0,1000,1000,4,1000,T4\n", "'num_gpu': invalid value 4;", "at most 2, the most GPUs of a node"),
        ("p0,64000,1000,1,500,\n", "'cpu_milli': invalid value 64000;", "at most 32000"),
        ("p0,1000,300000,2,1000,\n", "'memory_mib': invalid value 300000;", "at most 262144"),
        ("p0,1000,1000,1,500,V100M61\n", "'gpu_spec': invalid value 'V100M61';", "did you mean V100M16 for V100M61?"),
        ("p0,1000,1000,1,500,v100m16\np1,1000,1000,16,1000,\n", "'gpu_spec': invalid value 'v100m16';",
         "did you mean V100M16 for v100m16?"),
    ],
    ids=["more GPUs than any node", "more GPUs than any node of the model", "more CPU than any node",
         "more memory than any node with the GPUs", "a model name with a typo", "case differs, and too many GPUs"],
)
def test_a_pod_list_no_node_could_take_even_empty_is_refused(tmp_path, capsys, rows, field, shown):
    """Every level would read 100 % unallocated: that describes the files, not the policy."""
    assert _place(tmp_path, rows) == 2
    err = capsys.readouterr().err
    assert f"field {field}" in err and shown in err and "row 2" in err and "pods.csv" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_pods_no_node_can_take_are_named_and_the_rest_replayed(tmp_path, capsys):
    rows = "p0,1000,1000,1,500,\np1,1000,1000,1,500,NOPE\np2,1000,1000,16,1000,\np3,1000,1000,1,500,T4|V100M61\n"
    assert _place(tmp_path, rows) == 0
    out, err = capsys.readouterr()
    assert "| 100 |" in out
    notes = err.strip().splitlines()
    assert len(notes) == 3 and all(n.startswith("gputide place: note: ") for n in notes)
    assert "2 of 4 pods fit no node" in notes[0] and "row 3: field 'gpu_spec' is 'NOPE'" in notes[0]
    assert "'NOPE'" in notes[1] and "row 3" in notes[1] and "did you mean" not in notes[1]
    assert "'V100M61'" in notes[2] and "row 5" in notes[2] and "did you mean V100M16 for V100M61?" in notes[2]


def test_a_replayable_trace_gets_no_note(tmp_path, capsys):
    assert _place(tmp_path, "p0,1000,1000,1,500,\np1,1000,1000,8,1000,V100M16\np2,500,500,0,0,\n") == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("pods", "flags", "field"),
    [
        ("name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n", (), "'columns': invalid value 'gpu_milli'"),
        ("", (), "'format'"),
        (PODS, (), "'rows': invalid value 0"),
        (PODS + "p0,1000,abc,1,500,\n", (), "'memory_mib': invalid value 'abc'"),
        (PODS + "p0,1000,1000,1,500,\n", ("--inflate", "0"), "'--inflate': invalid value 0.0"),
        (PODS + "p0,1000,1000,1,500,\n", ("--inflate", "-1"), "'--inflate': invalid value -1.0"),
        (PODS + "p0,1000,1000,1,500,\n", ("--inflate", "nan"), "'--inflate': invalid value nan"),
        (PODS + "p0,1000,1000,1,500,\n", ("--seeds", "0"), "'--seeds': invalid value 0"),
        (PODS + "p0,1000,1000,1,500,\n", ("--policy", "tetris"), "'--policy': invalid value 'tetris'"),
    ],
    ids=["missing column", "empty file", "header only", "non-numeric memory", "inflate 0", "inflate negative",
         "inflate nan", "no seeds", "unknown policy"],
)
def test_bad_files_and_flags_exit_2_with_one_line(tmp_path, capsys, pods, flags, field):
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(pods)
    argv = ["place", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
            "--policy", "gputide", "--seeds", "1", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"field {field}" in err and "allowed: " in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("pods", "code", "shown"),
    [
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,8000,1,500,T4\np1,4000,8000,2,1000,T4\n", 2,
         "field 'row 2': invalid value 'p0,4000,8000,1,500,T4'; allowed: at most 5 fields"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,8000,1,500,\np1,4000,8000,2,1000,\n", 0, ""),
    ],
    ids=["a gpu_spec value on every row, no gpu_spec column", "a trailing comma on every row"],
)
def test_rows_longer_than_the_header_are_not_read_one_column_over(tmp_path, capsys, pods, code, shown):
    """pandas takes the first column of such a file for its index and reads cpu_milli's value as the name, memory's
    as cpu_milli, ...: the error named num_gpu '500', a value the file has under gpu_milli."""
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(pods)
    assert main(["place", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                 "--policy", "gputide", "--seeds", "1"]) == code
    err = capsys.readouterr().err
    assert shown in err and "Traceback" not in err and "field 'num_gpu'" not in err
