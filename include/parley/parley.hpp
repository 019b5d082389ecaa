// The whole public API of parley.
#pragma once

#include "parley/ai.hpp"
#include "parley/bpe.hpp"
#include "parley/compression.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/llm.hpp"
#include "parley/message.hpp"
#include "parley/message_store.hpp"
#include "parley/openai_client.hpp"
#include "parley/profiles.hpp"
#include "parley/sse.hpp"
#include "parley/thread_pool.hpp"
#include "parley/tokens.hpp"
#include "parley/tools.hpp"
#include "parley/usage.hpp"
