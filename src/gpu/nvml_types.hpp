#pragma once
// The few NVML types sonde uses, declared here (no NVML header at build time). Layouts and codes
// follow NVIDIA's nvml.h; the sizes are checked so a mistake fails the build. Shared with the
// fake library of the tests (tests/fakes/fake_nvml.cpp), which stands in for the driver.
#include <cstddef>

extern "C" {

struct nvmlDevice_st;
typedef struct nvmlDevice_st* nvmlDevice_t;

typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_ENABLED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

enum { NVML_TEMPERATURE_GPU = 0 };
/// nvmlDeviceGetMigMode's modes.
enum { NVML_DEVICE_MIG_DISABLE = 0, NVML_DEVICE_MIG_ENABLE = 1 };

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
  unsigned int version;  ///< nvmlMemory_v2 below
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

/// nvmlProcessInfo_v1_t: the plain (unversioned) process calls.
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/// nvmlProcessInfo_t as used by the _v2 and _v3 process calls.
typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;  ///< CPU timestamp, microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

/// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v2/_v3.
typedef struct nvmlPciInfo_st {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

}  // extern "C"

namespace sonde::gpu::nvml {

/// NVML_STRUCT_VERSION(Memory, 2).
constexpr unsigned int kMemoryV2Version =
    static_cast<unsigned int>(sizeof(nvmlMemory_v2_t) | (2u << 24));
/// NVML_VALUE_NOT_AVAILABLE for unsigned long long fields (e.g. usedGpuMemory).
constexpr unsigned long long kValueNotAvailable = ~0ULL;
constexpr unsigned int kNameBufferSize = 96;    // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned int kUuidBufferSize = 96;    // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned int kDriverBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

static_assert(sizeof(nvmlReturn_t) == 4);
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(offsetof(nvmlMemory_v2_t, total) == 8 && offsetof(nvmlMemory_v2_t, used) == 32);
static_assert(kMemoryV2Version == 0x02000028u);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(sizeof(nvmlProcessInfo_t) == 24);
static_assert(offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16);
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
static_assert(offsetof(nvmlProcessUtilizationSample_t, smUtil) == 16);
static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(offsetof(nvmlPciInfo_t, busId) == 36);

}  // namespace sonde::gpu::nvml
