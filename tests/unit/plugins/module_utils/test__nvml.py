"""Table tests for NVML error diagnoses (pure; the binding itself is exercised in tests/integration)."""

import pynvml
import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _nvml


@pytest.mark.parametrize(
    ("code", "name", "cause", "next_step"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "LIBRARY_NOT_FOUND", "userspace library", "install the driver"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "DRIVER_NOT_LOADED", "Secure Boot", "reboot the node"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "LIB_RM_VERSION_MISMATCH", "old kernel module", "reboot the node"),
        (pynvml.NVML_ERROR_GPU_IS_LOST, "GPU_IS_LOST", "fallen off the bus", "Xid 79"),
        (pynvml.NVML_ERROR_RESET_REQUIRED, "RESET_REQUIRED", "requires a reset", "nvidia-smi -r"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "NO_PERMISSION", "no permission", "become"),
        (pynvml.NVML_ERROR_UNKNOWN, "UNKNOWN", "unknown error", "dmesg"),
        (4242, "ERROR_4242", "NVML returned ERROR_4242", "nvidia-smi"),
    ],
)
def test_diagnose(code, name, cause, next_step):
    diag = _nvml.diagnose(code, gpu_index=2)
    assert diag["error"] == name and diag["code"] == code and diag["gpu_index"] == 2
    assert cause in diag["cause"]
    assert next_step in diag["next_step"]


def test_error_names_agree_with_the_binding():
    # The table labels codes; it must not drift from the binding's constants.
    for code, name in _nvml.ERROR_NAMES.items():
        assert getattr(pynvml, "NVML_ERROR_" + name) == code, name


def test_device_fatal_codes_are_known():
    assert _nvml.DEVICE_FATAL <= set(_nvml.ERROR_NAMES)


class FakeNvml:
    """Just enough of pynvml for collect(): one GPU whose memory query reports it lost (Xid 79 mid-run)."""

    NVMLError = pynvml.NVMLError
    NVML_TEMPERATURE_GPU = 0

    def __getattr__(self, name):
        def unsupported(*args):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return unsupported

    @staticmethod
    def nvmlInit():
        return None

    @staticmethod
    def nvmlShutdown():
        return None

    @staticmethod
    def nvmlDeviceGetCount():
        return 1

    @staticmethod
    def nvmlDeviceGetHandleByIndex(index):
        return index

    @staticmethod
    def nvmlDeviceGetPciInfo(handle):
        return type("Pci", (), {"busId": b"00000000:41:00.0"})()

    @staticmethod
    def nvmlDeviceGetMemoryInfo(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)


def test_a_gpu_lost_mid_query_keeps_its_bus_id():
    found = _nvml.collect(FakeNvml())
    gpu = found["gpus"][0]
    assert gpu["diagnosis"]["error"] == "GPU_IS_LOST" and gpu["pci_bus_id"] == "00000000:41:00.0"
