#include "parley/compression.hpp"

#include <utility>

#include "parley/errors.hpp"

namespace parley {

TokenLimitHandler summarizeAndTruncate(SummaryOptions options) {
  return [options = std::move(options)](ConversationManager& conversation, const TokenCheck&) {
    const ConversationOptions& config = conversation.options();
    if (!config.llm) throw ValidationError("options.llm", "summarizing needs a model");

    const MessageStore before = conversation.store();
    ChatRequest request = config.request;
    request.messages = conversation.getMessages();
    request.messages.push_back(Message::user(options.instructions));
    request.tools = nlohmann::json::array();
    request.stream = false;
    if (options.maxTokens) request.maxTokens = options.maxTokens;
    if (options.timeout) request.timeout = options.timeout;
    ChatResult result = config.llm->generate(request);
    if (result.usage) conversation.addSideUsage(*result.usage);
    if (result.message.content.empty()) {
      throw ProtocolError("the model returned an empty summary");
    }

    conversation.modifyStore([&](MessageStore& store) {
      if (store.viewEpoch() != before.viewEpoch() || store.viewSize() != before.viewSize()) {
        throw Error("the conversation changed while it was being summarized");
      }
      std::vector<MessageStore::Index> view;
      store.view().forEach(0, store.viewSize(), [&](MessageStore::Index i) {
        if (store.stored(i).role == Role::System) view.push_back(i);
      });
      view.push_back(
          store.appendHidden(Message::system(options.summaryPrefix + result.message.content)));
      const auto& users = store.roleIndex(Role::User);
      if (!users.empty()) {
        const MessageStore::Index lastUser = users.back();
        bool inTurn = false;
        store.view().forEach(0, store.viewSize(), [&](MessageStore::Index i) {
          inTurn = inTurn || i == lastUser;
          if (inTurn && store.stored(i).role != Role::System) view.push_back(i);
        });
      }
      store.commitView(view);
    });
  };
}

}  // namespace parley
