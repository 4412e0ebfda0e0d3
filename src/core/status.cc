#include "kiln/status.h"

namespace kiln {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "Ok";
    case StatusCode::kFailed: return "Failed";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kInvalidModel: return "InvalidModel";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kNotImplemented: return "NotImplemented";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kInternal: return "Internal";
  }
  return "Failed";
}

}  // namespace kiln
