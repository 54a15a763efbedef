"""Device descriptions: id, kind, process index, attributes; all vs addressable devices."""

from __future__ import annotations

from pathlib import Path

import pytest

from asyncjit import Client
from asyncjit.runtime import DeviceDescription
from asyncjit.runtime._description import _numa_node, _parse_cpulist, host_attributes


def test_descriptions_of_a_client() -> None:
    with Client("cpu:2,reference") as client:
        assert client.addressable_devices() == client.devices()  # one process owns them all
        descs = [d.description for d in client.devices()]
        assert [(x.id, x.kind, x.process_index) for x in descs] == [
            (0, "cpu", 0),
            (1, "cpu", 0),
            (2, "reference", 0),
        ]
        assert all(isinstance(x, DeviceDescription) for x in descs) and str(descs[2]) == "reference:2"
        attrs = descs[0].attributes
        assert isinstance(attrs["cpu_model"], str) and attrs["cpu_model"]
        assert isinstance(attrs["cores"], int) and attrs["cores"] >= 1
        assert isinstance(attrs["numa_node"], int) and attrs["numa_node"] >= 0
        assert "process 0" in descs[1].debug_string() and "cores=" in descs[1].debug_string()
        assert all(d.is_addressable for d in client.devices())
        with pytest.raises(TypeError):
            attrs["cores"] = 99  # type: ignore[index]


def test_cpulists_and_the_numa_node_holding_most_cores(tmp_path: Path) -> None:
    assert _parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    for node, cpus in (("node0", "0-3"), ("node1", "4-7")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus + "\n")
    assert _numa_node({5, 6, 1}, str(tmp_path)) == 1
    assert _numa_node({0}, str(tmp_path)) == 0
    assert _numa_node({0}, str(tmp_path / "missing")) == 0
    assert host_attributes() is host_attributes()  # read once per process
