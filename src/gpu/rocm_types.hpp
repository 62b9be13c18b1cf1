#pragma once
// The few ROCm SMI types sonde uses, declared here (no rocm_smi.h at build time); layouts follow
// AMD's rocm_smi.h. Shared with the fake library of the tests (tests/fakes/fake_rocm.cpp).
#include <cstddef>
#include <cstdint>

extern "C" {

typedef enum {
  RSMI_STATUS_SUCCESS = 0,
  RSMI_STATUS_INVALID_ARGS = 1,
  RSMI_STATUS_NOT_SUPPORTED = 2,
  RSMI_STATUS_FILE_ERROR = 3,
  RSMI_STATUS_PERMISSION = 4,
  RSMI_STATUS_OUT_OF_RESOURCES = 5,
  RSMI_STATUS_INTERNAL_EXCEPTION = 6,
  RSMI_STATUS_INPUT_OUT_OF_BOUNDS = 7,
  RSMI_STATUS_INIT_ERROR = 8,
  RSMI_STATUS_NOT_YET_IMPLEMENTED = 9,
  RSMI_STATUS_NOT_FOUND = 10,
  RSMI_STATUS_INSUFFICIENT_SIZE = 11,
  RSMI_STATUS_INTERRUPT = 12,
  RSMI_STATUS_UNEXPECTED_SIZE = 13,
  RSMI_STATUS_NO_DATA = 14,
  RSMI_STATUS_UNEXPECTED_DATA = 15,
  RSMI_STATUS_BUSY = 16,
  RSMI_STATUS_REFCOUNT_OVERFLOW = 17,
  RSMI_STATUS_UNKNOWN_ERROR = 0xFFFFFFFF
} rsmi_status_t;

enum { RSMI_MEM_TYPE_VRAM = 0 };
enum { RSMI_TEMP_TYPE_EDGE = 0, RSMI_TEMP_TYPE_JUNCTION = 1 };
enum { RSMI_TEMP_CURRENT = 0 };
enum { RSMI_SW_COMP_DRIVER = 0 };

typedef struct {
  uint32_t process_id;
  uint32_t pasid;
  uint64_t vram_usage;    ///< bytes
  uint64_t sdma_usage;    ///< microseconds
  uint32_t cu_occupancy;  ///< percent of compute units, CU_OCCUPANCY_INVALID when unknown
} rsmi_process_info_t;

typedef struct {
  uint32_t major;
  uint32_t minor;
  uint32_t patch;
  const char* build;
} rsmi_version_t;

}  // extern "C"

namespace sonde::gpu::rocm {

constexpr uint32_t kCuOccupancyInvalid = 0xFFFFFFFF;  // CU_OCCUPANCY_INVALID
constexpr uint64_t kMaxFanSpeed = 255;                // RSMI_MAX_FAN_SPEED

static_assert(sizeof(rsmi_status_t) == 4);
static_assert(sizeof(rsmi_process_info_t) == 32);
static_assert(offsetof(rsmi_process_info_t, vram_usage) == 8);
static_assert(offsetof(rsmi_process_info_t, cu_occupancy) == 24);

}  // namespace sonde::gpu::rocm
