// lastmile — the one C++ include.
#pragma once

#include "lastmile/batch.hpp"
#include "lastmile/error.hpp"
#include "lastmile/logits_processor.hpp"
#include "lastmile/logits_view.hpp"
#include "lastmile/output.hpp"
#include "lastmile/params.hpp"
#include "lastmile/request_batch.hpp"
#include "lastmile/sampler.hpp"
#include "lastmile/version.hpp"
