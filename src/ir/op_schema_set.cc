// The schema registry instance. Schemas register themselves from src/ir/schemas/*.cc; programs
// link kiln_ir as a whole archive (see CMakeLists.txt) so none of those files is dropped.
#include "ir/op_schema.h"

namespace kiln::ir {

OpSchemaRegistry& OpSchemaRegistry::global() {
  static OpSchemaRegistry registry;
  return registry;
}

}  // namespace kiln::ir
