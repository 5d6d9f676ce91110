"""What the two DeepGEMM recipes (``deepgemm-sm90``, ``deepgemm-megamoe``) share: the upstream commit
they were verified against, the kernel-parameter and launcher anchors, the ``_C`` registration in
``csrc/python_api.cpp``, the files each adds under ``deep_gemm/include/deep_gemm/<folder>/`` and the
switch header there. Only the names differ (folder, trace header, C++ namespace of the buffer)."""

from __future__ import annotations

from xstage_trace.instrument.recipes.model import AddedFile, Anchor, Switch, Upstream

UPSTREAM = Upstream("deepseek-ai/DeepGEMM", "54e22612409371d6364144b69086735beb54e98b", "2026-06-23",
                    "Multiple updates and refactorings (#364)")

IMPLS = "deep_gemm/include/deep_gemm/impls"
LAUNCH = "csrc/jit_kernels/impls"


def kernel_param_anchor(key: str, stem: str, signature_example: str) -> Anchor:
    """The kernel ``<stem>_impl(...)`` gains a last parameter ``const ::xstage::DeviceBuffer xstage_buf``."""
    return Anchor(f"{key}.param", f"{IMPLS}/{stem}.cuh", rf"\b{stem}_impl\((?:[^()]|\([^()]*\))*?(?P<at>)\)\s*\{{", "replace",
                  ", const ::xstage::DeviceBuffer xstage_buf", signature_example)


def launcher_anchors(key: str, stem: str, buffer_header: str, buffer_ns: str, launch_example: str) -> list[Anchor]:
    """The kernel's host launcher includes the trace-buffer header and passes ``<buffer_ns>::current()`` last."""
    f = f"{LAUNCH}/{stem}.hpp"
    return [
        Anchor(f"{key}.launch_include", f, r'^#include\s*"runtime_utils\.hpp"\n', "after",
               f'#include "../../xstage/{buffer_header}"', '#include "runtime_utils.hpp"'),
        Anchor(f"{key}.launch_arg", f, r"\blaunch_kernel\(kernel,\s*config,(?:[^()]|\([^()]*\))*?(?P<at>)\)\);", "replace",
               f", {buffer_ns}::current()", launch_example),
    ]


def python_api_anchors(buffer_header: str, buffer_ns: str) -> tuple[Anchor, Anchor]:
    """``_C`` includes the trace-buffer header and registers its Python setters."""
    return (
        Anchor("python_api.include", "csrc/python_api.cpp", r'^#include\s*"apis/runtime\.hpp"\n', "after",
               f'#include "xstage/{buffer_header}"', '#include "apis/runtime.hpp"'),
        Anchor("python_api.register", "csrc/python_api.cpp", r"^[ \t]*deep_gemm::runtime::register_apis\(m\);\n", "after",
               f"deep_gemm::{buffer_ns}::register_apis(m);", "deep_gemm::runtime::register_apis(m);"),
    )


def added_files(folder: str, trace_header: str, buffer_header: str) -> tuple[AddedFile, ...]:
    """The probe header (a copy of ``<xstage/probe.cuh>``), the target's adapter header beside it (so
    that the JIT hashes both) and the trace-buffer header for ``_C``."""
    inc = f"deep_gemm/include/deep_gemm/{folder}"
    return (
        AddedFile(f"{inc}/probe.cuh", "<xstage/probe.cuh>"),
        AddedFile(f"{inc}/{trace_header}", f"{inc}/{trace_header}"),
        AddedFile(f"csrc/xstage/{buffer_header}", f"csrc/xstage/{buffer_header}"),
    )


def switch(folder: str) -> Switch:
    """``deep_gemm/include/deep_gemm/<folder>/config.cuh``: probes compiled in (--trace) or out (--no-trace)."""
    return Switch(f"deep_gemm/include/deep_gemm/{folder}/config.cuh",
                  "#pragma once\n// Written by `xstage-trace instrument apply`: probes compiled in.\n"
                  "#ifndef XSTAGE_TRACE\n#define XSTAGE_TRACE 1\n#endif\n",
                  "#pragma once\n// Written by `xstage-trace instrument apply --no-trace`: probes compiled out;\n"
                  "// the kernels keep their xstage::DeviceBuffer argument.\n")


def jit_flags(cache_dir: str) -> dict[str, str]:
    """A JIT cache of its own for traced builds (DeepGEMM's cache key does not see environment flags)."""
    return {"DG_JIT_CACHE_DIR": cache_dir, "DG_JIT_PRINT_COMPILER_COMMAND": "1"}
