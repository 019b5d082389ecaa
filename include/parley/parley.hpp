// The whole public API of parley.
#pragma once

#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/message.hpp"
#include "parley/message_store.hpp"
#include "parley/store.hpp"
#include "parley/thread_pool.hpp"
#include "parley/tools.hpp"
#include "parley/usage.hpp"
#include "parley/bpe.hpp"
#include "parley/tokens.hpp"
