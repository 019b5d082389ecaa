// The reply reader of a protocol whose stream is JSON events that an assembler reads one by one
// (Anthropic Messages, OpenAI Responses): each event goes to the assembler, each non-empty delta
// to the caller's chunk handler; a whole (non-streamed) body is read by the protocol's own
// function; an API error carries the reply's request id. Internal to the client layer.
// Thread-safety: one reader belongs to one call.
#pragma once

#include <memory>
#include <string_view>
#include <utility>

#include "client/stream_assembler.hpp"
#include "parley/errors.hpp"
#include "parley/llm.hpp"
#include "parley/transport.hpp"

namespace parley::detail {

// `kComplete`: whether the assembler saw the stream's proper end; `kFromBody`: a whole reply.
template <class Assembler, bool (Assembler::*kComplete)() const noexcept,
          ChatResult (*kFromBody)(std::string_view)>
class EventStreamReader final : public HttpReplySink {
 public:
  // `onChunk` may be null (no caller to stream to); it must outlive the call.
  EventStreamReader(const ChunkHandler* onChunk, bool stream)
      : onChunk_(onChunk && *onChunk ? onChunk : nullptr), stream_(stream) {}

  void reset() override {
    assembler_ = std::make_unique<Assembler>();
    delivered_ = false;
  }

  bool onEvent(const SseEvent& event, const HttpReplyInfo& reply) override {
    if (event.data.empty()) return true;
    const StreamDelta* delta = nullptr;
    withRequestId(reply, [&] { delta = &assembler_->addEvent(event.data, reply.status); });
    if (!delta->empty() && onChunk_) {
      delivered_ = true;
      return (*onChunk_)(*delta);
    }
    return true;
  }

  void onStreamEnd(const HttpReplyInfo&) override { result_ = assembler_->finish(); }
  bool streamComplete() const noexcept override {
    return assembler_ && ((*assembler_).*kComplete)();
  }
  bool delivered() const noexcept override { return delivered_; }

  void onBody(std::string_view body, const HttpReplyInfo& reply) override {
    withRequestId(reply, [&] { result_ = kFromBody(body); });
    if (stream_ && onChunk_) deliverWhole(result_, *onChunk_);  // the server ignored "stream"
  }

  // The reply, once the transport's send() has returned.
  ChatResult& result() noexcept { return result_; }

 private:
  template <class Read>
  static void withRequestId(const HttpReplyInfo& reply, Read&& read) {
    try {
      std::forward<Read>(read)();
    } catch (const HttpError& e) {
      HttpError::Details details = e.details();
      details.requestId = reply.requestId;
      throw HttpError(std::move(details));
    }
  }

  const ChunkHandler* onChunk_;
  bool stream_;
  bool delivered_ = false;
  std::unique_ptr<Assembler> assembler_;
  ChatResult result_;
};

}  // namespace parley::detail
