// The attributes every reducing op has (op_definitions.cc), read once when
// a kernel is made.
#pragma once

#include <kolo/kolo.h>

#include "tensorflow/core/framework/op_kernel.h"

namespace kolo::tf {

struct ReduceAttrs {
  int op = KOLO_SUM;
  float prescale = 1, postscale = 1;
  bool ignoreNameScope = false;
  int processSet = 0;

  // `scales`: whether the op has prescale_factor / postscale_factor.
  void read(::tensorflow::OpKernelConstruction* c, bool scales) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op));
    if (scales) {
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale));
    }
    OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignoreNameScope));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &processSet));
  }
};

}  // namespace kolo::tf
