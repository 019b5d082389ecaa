// The whole public API of parley.
#pragma once

#include "parley/errors.hpp"
#include "parley/message.hpp"
#include "parley/usage.hpp"
#include "parley/bpe.hpp"
#include "parley/tokens.hpp"
