#include "parley/context_snapshot.hpp"

#include <mutex>
#include <optional>

#include "core/context_snapshot_state.hpp"
#include "parley/conversation_manager.hpp"

namespace parley {

ContextSnapshot::ContextSnapshot(nlohmann::json document) {
  if (document.is_null()) return;
  auto frozen = std::make_shared<Frozen>();
  frozen->document = std::move(document);
  std::call_once(frozen->built, [] {});
  frozen_ = std::move(frozen);
}

bool ContextSnapshot::isObject() const noexcept {
  return frozen_ && (frozen_->conversation || frozen_->document.is_object());
}

const nlohmann::json& ContextSnapshot::json() const {
  static const nlohmann::json kNull;
  if (!frozen_) return kNull;
  std::call_once(frozen_->built,
                 [&] { frozen_->document = frozen_->conversation->createSnapshot(); });
  return frozen_->document;
}

std::vector<Message> ContextSnapshot::messages() const {
  if (!frozen_) return {};
  if (frozen_->conversation) return frozen_->conversation->getMessages();
  ConversationManager restored;
  restored.restoreFromSnapshot(frozen_->document);
  return restored.getMessages();
}

const ConversationManager* ContextSnapshot::conversation() const noexcept {
  return frozen_ && frozen_->conversation ? &*frozen_->conversation : nullptr;
}

}  // namespace parley
