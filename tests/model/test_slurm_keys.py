"""model/slurm_keys.py: Slurm 23.11's keys and values, as the nodes' slurmctld/slurmd read them."""

from __future__ import annotations

import pytest

from model.slurm_keys import table_23_11

T = table_23_11()


def test_keys_match_without_case_as_slurm_parses_them():
    assert T.canonical("slurm.conf", "DefCpuPerGPU") == "DefCPUPerGPU"
    assert T.canonical("slurm.conf", "treewidth") == "TreeWidth"
    assert T.key_problem("slurm.conf", "DEFCPUPERGPU") is None
    assert T.line_key("slurm.conf", "partitionname") == "PartitionName"
    assert T.line_key("slurm.conf", "ClusterName") is None


@pytest.mark.parametrize(
    "conf,key,said",
    [
        ("slurm.conf", "SlurmctldParameter", "SlurmctldParameter: not a slurm.conf key in Slurm 23.11.4 (did you mean SlurmctldParameters?)"),
        ("slurm.conf", "SchedulerAuth", "SchedulerAuth: defunct in Slurm 23.11.4 (slurmctld logs 'please remove it from slurm.conf')"),
        ("cgroup.conf", "CgroupAutomount", "CgroupAutomount: defunct in Slurm 23.11.4 (slurmctld logs 'please remove it from cgroup.conf')"),
        ("gres.conf", "File", "File: not a gres.conf key in Slurm 23.11.4"),
    ],
)  # fmt: skip
def test_unknown_and_defunct_keys_are_named(conf, key, said):
    assert T.key_problem(conf, key) == said


@pytest.mark.parametrize(
    "conf,key,value,said",
    [
        ("slurm.conf", "TreeWidth", "65536", "out of range for uint16 (0..65535)"),
        ("slurm.conf", "TreeWidth", "-1", "out of range for uint16"),
        ("slurm.conf", "MaxNodeCount", "@MAX_NODES@", "not a number (uint32)"),
        ("slurm.conf", "TaskPlugin", "task/cgroup,task/numa", "task/numa is not a task plugin Slurm 23.11.4 knows"),
        ("slurm.conf", "SelectType", "select/cons_res", "select/cons_res is not a select plugin"),
        ("slurm.conf", "SelectTypeParameters", "CR_Core,CR_Bogus", "CR_Bogus is not a value"),
        ("slurm.conf", "SlurmctldDebug", "chatty", "chatty is not a value"),
        ("slurm.conf", "HealthCheckNodeState", "ANY,DRAINED", "DRAINED is not a value"),
        ("cgroup.conf", "CgroupPlugin", "disabled", "disabled is not a cgroup plugin"),
        ("cgroup.conf", "ConstrainCores", "maybe", "not a boolean"),
    ],
)
def test_values_23_11_refuses_are_named(conf, key, value, said):
    problem = T.value_problem(conf, key, value)
    assert problem is not None and problem.startswith(f"{key}={value}: ") and said in problem


@pytest.mark.parametrize(
    "conf,key,value",
    [
        ("slurm.conf", "TreeWidth", "65533"),
        ("slurm.conf", "MaxNodeCount", "INFINITE"),
        ("slurm.conf", "DefMemPerCPU", "4k"),
        ("slurm.conf", "TaskPlugin", "task/cgroup,task/affinity"),
        ("slurm.conf", "SelectTypeParameters", "cr_core_memory"),
        ("slurm.conf", "SlurmdDebug", "7"),
        ("slurm.conf", "PropagateResourceLimitsExcept", "RLIMIT_MEMLOCK,NOFILE"),
        ("slurm.conf", "MpiDefault", "pmix"),
        ("slurm.conf", "JobCompType", "jobcomp/none"),
        ("cgroup.conf", "CgroupPlugin", "cgroup/v2"),
        ("cgroup.conf", "ConstrainRAMSpace", "No"),
        ("cgroup.conf", "AllowedRAMSpace", "98.5"),
    ],
)
def test_values_23_11_accepts_pass(conf, key, value):
    assert T.value_problem(conf, key, value) is None


def test_a_file_is_checked_line_by_line_with_line_keys_and_comments():
    text = (
        "# comment\n"
        "ClusterName=x SlurmUser=root  # two keys on one line\n"
        "Include /etc/slurm/more.conf\n"
        "NodeName=a CPUs=2 Weight=1 TreeWidth=3\n"
        'PartitionName=p Nodes=ALL Default=maybe Comment="x y"\n'
        "Bogus\n"
    )
    assert T.problems("slurm.conf", text) == [
        "4: TreeWidth: not a NodeName line key in Slurm 23.11.4",
        "5: Default=maybe: not a boolean (Slurm takes yes, up, true, 1, no, down, false, 0)",
        "5: Comment: not a PartitionName line key in Slurm 23.11.4",
        "6: cannot parse 'Bogus'",
    ]


def test_gres_lines_use_the_gres_keys():
    assert T.problems("gres.conf", "Name=gpu File=/dev/nvidia[0-7]\nNodeName=a Name=gpu Count=8 Bad=1\n") == [
        "2: Bad: not a NodeName line key in Slurm 23.11.4"
    ]


def test_only_the_three_files_are_covered():
    with pytest.raises(ValueError, match="covers slurm.conf, cgroup.conf, gres.conf"):
        T.problems("plugstack.conf", "")
