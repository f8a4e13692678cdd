"""Run provenance: the CPU kind and builds a run summary records, since bit-identical reruns hold only on one
machine kind and build (jaxwebrl.evaluation.provenance)."""

from __future__ import annotations

import jax
import jaxlib

from jaxwebrl.evaluation import provenance

INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 amx_tile amx_bf16

processor\t: 1
model name\t: a second block that must not be read
flags\t\t: sse4_2
"""

ARM = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes sve sve2 bf16 i8mm
CPU implementer\t: 0x41
CPU part\t: 0xd4f
"""


def test_cpu_from_cpuinfo_reads_the_model_and_the_isa_extensions_of_the_first_processor():
    intel = provenance.cpu_from_cpuinfo(INTEL)
    assert intel == {"model": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
                     "isa": ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                             "amx_tile"]}
    assert provenance.cpu_from_cpuinfo(ARM) == {"model": "0xd4f", "isa": ["asimd", "sve", "sve2", "bf16", "i8mm"]}
    assert provenance.cpu_from_cpuinfo("") == {"model": "", "isa": []}


def test_run_start_records_this_machines_cpu_and_builds_and_the_report_names_them():
    machine = provenance.run_start()["machine"]
    assert machine["jax"] == jax.__version__ and machine["jaxlib"] == jaxlib.__version__
    assert machine["cpu"]["model"] and set(machine["cpu"]["isa"]) <= set(provenance.ISA_FLAGS)
    line = provenance.machine_line(machine)
    assert line.startswith(f"{machine['cpus']} CPUs ({machine['cpu']['model']}; ")
    assert line.endswith(f"jax {jax.__version__} / jaxlib {jaxlib.__version__}")
    assert provenance.machine_line({"cpus": 2}) == "2 CPUs"  # a summary written before the CPU was recorded


def test_base_model_line_names_the_weights_hash_or_says_there_is_no_record():
    base = {"name": "smollm2", "weights_sha256": "a672150fb4f99d7c8f41", "converter": {"gguf": "0.19.0", "numpy": "2.4.6"}}
    assert provenance.base_model_line(base) == "base model smollm2 (weights sha256 a672150fb4f9, converted by gguf 0.19.0, numpy 2.4.6)"
    assert provenance.base_model_line({"name": "smollm2"}) == "base model smollm2 (no conversion record)"
