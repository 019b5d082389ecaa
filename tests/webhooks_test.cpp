// WebhookSender (src/service/webhooks.hpp): a signed post to a loopback receiver, the refusals of
// targets (scheme, loopback and private addresses, redirects) and the caps (body, queue,
// timeout, retries).
#include "service/webhooks.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "http/server.hpp"
#include "model/sha256.hpp"
#include "parley/errors.hpp"

namespace parley::service {
namespace {

using namespace std::chrono_literals;

// A loopback HTTP receiver that records what it is sent and answers with `statuses` in turn
// (then 200). With `hold`, each request waits until release().
class Receiver {
 public:
  explicit Receiver(std::vector<int> statuses = {}, bool hold = false)
      : statuses_(std::move(statuses)), hold_(hold) {
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock lock(mutex_);
      requests_.push_back(req);
      changed_.notify_all();
      changed_.wait(lock, [&] { return !hold_; });
      const size_t n = requests_.size() - 1;
      res.status = n < statuses_.size() ? statuses_[n] : 200;
      if (res.status == 302) res.set_header("Location", "/elsewhere");
    });
    port_ = server_.start("127.0.0.1", 0, "receiver");
  }
  // parley's front, not httplib's listen thread: httplib's stop() before its thread listened
  // left the thread listening and the join waiting (a test that sent nothing hung under load).
  ~Receiver() {
    release();
    server_.shutdown();
  }
  std::string url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // Waits for the n-th request (1-based); a condition, bounded by the test's own timeout.
  httplib::Request await(size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 20s, [&] { return requests_.size() >= n; });
    EXPECT_GE(requests_.size(), n);
    return requests_.size() >= n ? requests_[n - 1] : httplib::Request{};
  }
  size_t count() {
    std::lock_guard lock(mutex_);
    return requests_.size();
  }
  void release() {
    std::lock_guard lock(mutex_);
    hold_ = false;
    changed_.notify_all();
  }

 private:
  http::Server server_;
  std::vector<int> statuses_;
  bool hold_;
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<httplib::Request> requests_;
};

WebhookOptions loopbackOptions() {
  WebhookOptions o;
  o.allowLoopback = true;
  o.retryDelay = 1ms;
  o.maxRetryDelay = 2ms;
  o.timeout = 5s;
  o.log = [](const std::string&) {};
  return o;
}

TEST(WebhooksTest, ClassifiesAddresses) {
  EXPECT_EQ(classifyAddress("127.0.0.1"), AddressKind::Loopback);
  EXPECT_EQ(classifyAddress("127.9.9.9"), AddressKind::Loopback);
  EXPECT_EQ(classifyAddress("::1"), AddressKind::Loopback);
  EXPECT_EQ(classifyAddress("::ffff:127.0.0.1"), AddressKind::Loopback);
  for (const char* a :
       {"10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1",
        "0.0.0.0", "224.0.0.1", "255.255.255.255", "::", "fd00::1", "fe80::1", "ff02::1",
        "::ffff:10.0.0.1", "64:ff9b::a9fe:a9fe"}) {
    EXPECT_EQ(classifyAddress(a), AddressKind::Private) << a;
  }
  for (const char* a : {"8.8.8.8", "172.32.0.1", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"})
    EXPECT_EQ(classifyAddress(a), AddressKind::Public) << a;
  EXPECT_EQ(classifyAddress("example.com"), AddressKind::Invalid);
}

TEST(WebhooksTest, SignsWithHmacSha256) {
  // RFC 4231, test case 2.
  EXPECT_EQ(webhookSignature("Jefe", "what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key longer than the block is hashed first (RFC 4231, test case 6).
  EXPECT_EQ(webhookSignature(std::string(131, '\xaa'),
                             "Test Using Larger Than Block-Size Key - Hash Key First"),
            "sha256=60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(WebhooksTest, RefusesBadTargetsByName) {
  WebhookOptions strict;
  strict.log = [](const std::string&) {};
  WebhookSender sender(strict);
  EXPECT_NO_THROW(sender.checkUrl("https://hooks.example.com/x"));
  EXPECT_THROW(sender.checkUrl("http://hooks.example.com/x"), ValidationError);
  EXPECT_THROW(sender.checkUrl("http://127.0.0.1:9/x"), ValidationError);  // loopback not allowed
  EXPECT_THROW(sender.checkUrl("ftp://hooks.example.com/x"), ValidationError);
  EXPECT_THROW(sender.checkUrl("https://user:secret@hooks.example.com/x"), ValidationError);
  EXPECT_THROW(sender.checkUrl("not a url"), ValidationError);
  EXPECT_THROW(sender.checkUrl("https://h.example.com/" + std::string(3000, 'a')), ValidationError);
  EXPECT_FALSE(sender.send({"http://127.0.0.1:9/x", "run.completed", "{}"}));
  EXPECT_EQ(sender.stats().refused, 1u);
}

TEST(WebhooksTest, PostsASignedBodyToALoopbackReceiver) {
  Receiver receiver;
  WebhookOptions o = loopbackOptions();
  o.secret = "s3cret";
  WebhookSender sender(o);
  const std::string body = R"({"run_id":"r1","status":"success"})";
  ASSERT_TRUE(
      sender.send({receiver.url(), "run.completed", body, {{"Authorization", "Bearer tok"}}}));
  const httplib::Request got = receiver.await(1);
  EXPECT_EQ(got.body, body);
  EXPECT_EQ(got.get_header_value("X-Parley-Signature-256"), webhookSignature("s3cret", body));
  EXPECT_EQ(got.get_header_value("X-Parley-Event"), "run.completed");
  EXPECT_EQ(got.get_header_value("Authorization"), "Bearer tok");
  EXPECT_EQ(got.get_header_value("Content-Type"), "application/json");
  EXPECT_FALSE(got.get_header_value("X-Parley-Delivery").empty());
  ASSERT_TRUE(sender.idle(20s));
  EXPECT_EQ(sender.stats().delivered, 1u);
}

TEST(WebhooksTest, RefusesLoopbackAndPrivateTargetsUnlessAllowed) {
  Receiver receiver;
  WebhookOptions o = loopbackOptions();
  o.allowLoopback = false;
  // A name that resolves to a private or loopback address is refused at delivery, unsent.
  o.resolve = [](const std::string& host) {
    return std::vector<std::string>{host == "inside.example" ? "10.0.0.5" : "127.0.0.1"};
  };
  WebhookSender sender(o);
  ASSERT_TRUE(sender.send({"https://inside.example/x", "e", "{}"}));
  ASSERT_TRUE(sender.send({"https://rebind.example/x", "e", "{}"}));
  ASSERT_TRUE(sender.send({"https://[::1]/x", "e", "{}"}));
  ASSERT_TRUE(sender.idle(20s));
  EXPECT_EQ(sender.stats().refused, 3u);
  EXPECT_EQ(sender.stats().retries, 0u);
  // Reserved headers are the sender's own.
  EXPECT_FALSE(sender.send({"https://a.example/x", "e", "{}", {{"X-Parley-Signature-256", "x"}}}));
  EXPECT_FALSE(sender.send({"https://a.example/x", "e", "{}", {{"X-A", "a\r\nInjected: 1"}}}));
  EXPECT_EQ(receiver.count(), 0u);
}

TEST(WebhooksTest, RetriesWithBackoffThenGivesUp) {
  Receiver flaky({503, 429, 200});
  WebhookSender sender(loopbackOptions());
  ASSERT_TRUE(sender.send({flaky.url(), "e", "{}"}));
  flaky.await(3);
  ASSERT_TRUE(sender.idle(20s));
  EXPECT_EQ(sender.stats().delivered, 1u);
  EXPECT_EQ(sender.stats().retries, 2u);

  Receiver down({500, 500, 500, 500});
  WebhookOptions o = loopbackOptions();
  o.maxRetries = 2;
  WebhookSender giving(o);
  ASSERT_TRUE(giving.send({down.url(), "e", "{}"}));
  ASSERT_TRUE(giving.idle(20s));
  EXPECT_EQ(down.count(), 3u);  // the first attempt and two retries
  EXPECT_EQ(giving.stats().failed, 1u);

  Receiver refusing({400});
  WebhookSender once(loopbackOptions());
  ASSERT_TRUE(once.send({refusing.url(), "e", "{}"}));
  ASSERT_TRUE(once.idle(20s));
  EXPECT_EQ(refusing.count(), 1u);  // a 4xx is not retried
  EXPECT_EQ(once.stats().failed, 1u);
}

// Each delivery says how it ended, once: what an A2A push cursor waits for before it moves on.
TEST(WebhooksTest, TellsHowEachDeliveryEnded) {
  Receiver ok;
  Receiver refusing({400});
  Receiver down({500, 500});
  WebhookOptions o = loopbackOptions();
  o.maxRetries = 1;
  WebhookSender sender(o);
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<std::string, bool>> ended;
  auto delivery = [&](const std::string& url, const std::string& name) {
    WebhookDelivery d{url, "e", "{}"};
    d.done = [&, name](bool delivered) {
      std::lock_guard lock(mutex);
      ended.emplace_back(name, delivered);
      changed.notify_all();
    };
    return d;
  };
  ASSERT_TRUE(sender.send(delivery(ok.url(), "delivered")));
  ASSERT_TRUE(sender.send(delivery(refusing.url(), "refused")));
  ASSERT_TRUE(sender.send(delivery(down.url(), "given up")));
  std::unique_lock lock(mutex);
  changed.wait_for(lock, 20s, [&] { return ended.size() >= 3; });
  std::sort(ended.begin(), ended.end());
  EXPECT_EQ(ended, (std::vector<std::pair<std::string, bool>>{
                       {"delivered", true}, {"given up", false}, {"refused", false}}));
  EXPECT_EQ(down.count(), 2u);  // told once, after its retry
}

TEST(WebhooksTest, DoesNotFollowRedirects) {
  Receiver redirecting({302});
  WebhookSender sender(loopbackOptions());
  ASSERT_TRUE(sender.send({redirecting.url(), "e", "{}"}));
  ASSERT_TRUE(sender.idle(20s));
  EXPECT_EQ(redirecting.count(), 1u);
  EXPECT_EQ(sender.stats().failed, 1u);
  EXPECT_EQ(sender.stats().delivered, 0u);
}

TEST(WebhooksTest, CapsTheBodyTheQueueAndThePostTime) {
  Receiver slow({}, /*hold=*/true);
  WebhookOptions o = loopbackOptions();
  o.maxConcurrent = 1;
  o.maxQueue = 1;
  o.maxBodyBytes = 16;
  o.maxRetries = 0;
  o.timeout = 300ms;
  WebhookSender sender(o);
  EXPECT_FALSE(sender.send({slow.url(), "e", std::string(17, 'x')}));  // over the body cap
  EXPECT_EQ(sender.stats().refused, 1u);
  ASSERT_TRUE(sender.send({slow.url(), "e", "{}"}));  // posted: the receiver holds it
  slow.await(1);
  ASSERT_TRUE(sender.send({slow.url(), "e", "{}"}));   // queued behind it
  EXPECT_FALSE(sender.send({slow.url(), "e", "{}"}));  // past the queue
  EXPECT_EQ(sender.stats().dropped, 1u);
  // The held post ends at the timeout (not reached: given up, no retries left); the queued one
  // is then posted and held too.
  slow.await(2);
  EXPECT_GE(sender.stats().failed, 1u);
  slow.release();
  ASSERT_TRUE(sender.idle(20s));
  sender.stop();
  EXPECT_FALSE(sender.send({slow.url(), "e", "{}"}));  // stopped
}

}  // namespace
}  // namespace parley::service
