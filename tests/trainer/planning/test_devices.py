"""The device table and --device-memory sizes (trainer/planning/devices.py)."""
from __future__ import annotations

import os

import pytest

from trainer.planning.devices import DEVICE_NAMES, DEVICES, GIB, device_named, parse_memory_size


@pytest.mark.parametrize("text, expected", [("16GiB", 16 * 1024 ** 3), ("80GB", 80 * 1000 ** 3),
                                            ("512MiB", 512 * 1024 ** 2), ("1.5 GiB", int(1.5 * 1024 ** 3)),
                                            ("1073741824B", 1073741824), ("16gib", 16 * 1024 ** 3)])
def test_memory_sizes_are_read_in_binary_and_decimal_units(text, expected):
    assert parse_memory_size(text) == expected


@pytest.mark.parametrize("text", ["16G", "sixteen", "", "-4GiB", "0GB", "16 GiB of HBM"])
def test_an_unreadable_size_names_the_flag_and_shows_an_example(text):
    with pytest.raises(ValueError, match=r"--device-memory .*expected a size such as 16GiB, 80GB or 512MiB"):
        parse_memory_size(text)


@pytest.mark.parametrize("text", ["16", "1073741824", "0.5"])
def test_a_size_without_a_unit_is_refused_naming_the_units(text):
    # A bare 16 was read as 16 bytes: "more than 0.0 MiB", where 16 GiB was meant.
    with pytest.raises(ValueError) as raised:
        parse_memory_size(text)
    assert str(raised.value).startswith(f"--device-memory {text!r}: a size needs a unit; expected a size such as "
                                        "16GiB, 80GB or 512MiB (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB")


def test_an_unknown_device_lists_the_known_names():
    with pytest.raises(ValueError) as raised:
        device_named("v100")
    assert "--device 'v100': unknown device" in str(raised.value)
    for name in DEVICE_NAMES:
        assert name in str(raised.value)


def test_the_table_covers_the_devices_the_issue_names_each_with_its_figures_and_source():
    assert set(DEVICES) == {"tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "v100-16gb", "v100-32gb", "a100-40gb",
                            "a100-80gb", "h100-80gb", "h200-141gb", "l4", "a10g"}
    for device in DEVICES.values():
        assert device.memory_bytes >= 16 * GIB
        assert device.fp32_flops > 1e12
        assert device.source.startswith("https://")
    assert DEVICES["v100-16gb"].memory_bytes == 16 * GIB and DEVICES["a100-80gb"].memory_bytes == 80 * GIB
    assert DEVICES["v100-16gb"].bf16_flops is None  # no bfloat16 units on a V100


def test_cpu_is_this_machine_with_its_memory():
    cpu = device_named("cpu")
    assert cpu.memory_bytes == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert cpu.fp32_flops > 1e8
