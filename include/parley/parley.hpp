// The whole public API of parley.
#pragma once

#include "parley/errors.hpp"
#include "parley/message.hpp"
#include "parley/thread_pool.hpp"
#include "parley/tools.hpp"
#include "parley/usage.hpp"
