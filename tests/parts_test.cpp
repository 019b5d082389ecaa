// Message parts without a server: MIME sniffing, image headers, the caps, the Chat Completions
// form a message keeps (and reads back), image token counts, and each protocol's request writer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "client/anthropic_request.hpp"
#include "client/request_body.hpp"
#include "client/responses_request.hpp"
#include "parley/errors.hpp"
#include "parley/llm.hpp"
#include "parley/message.hpp"
#include "parley/part.hpp"
#include "parley/tokens.hpp"
#include "png_fixture.hpp"
#include "model/sha256.hpp"

namespace parley {
namespace {

using nlohmann::json;
using test::makePng;

std::string gifHeader(uint16_t w, uint16_t h) {
  std::string b = "GIF89a";
  b.push_back(static_cast<char>(w & 0xFF));
  b.push_back(static_cast<char>(w >> 8));
  b.push_back(static_cast<char>(h & 0xFF));
  b.push_back(static_cast<char>(h >> 8));
  b += std::string(20, '\0');
  return b;
}

std::string jpegHeader(uint16_t w, uint16_t h) {
  // SOI, an APP0 segment of 16 bytes, then SOF0 with height and width.
  std::string b = "\xFF\xD8\xFF\xE0";
  b += std::string("\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00", 16);
  b += std::string("\xFF\xC0\x00\x11\x08", 5);
  b.push_back(static_cast<char>(h >> 8));
  b.push_back(static_cast<char>(h & 0xFF));
  b.push_back(static_cast<char>(w >> 8));
  b.push_back(static_cast<char>(w & 0xFF));
  b += std::string(12, '\0');
  return b;
}

std::string webpVp8xHeader(uint32_t w, uint32_t h) {
  std::string b = "RIFF";
  b += std::string("\x00\x00\x00\x00", 4);
  b += "WEBPVP8X";
  b += std::string(8, '\0');  // chunk size and flags
  for (uint32_t v : {w - 1, h - 1}) {
    b.push_back(static_cast<char>(v & 0xFF));
    b.push_back(static_cast<char>((v >> 8) & 0xFF));
    b.push_back(static_cast<char>((v >> 16) & 0xFF));
  }
  return b;
}

std::string wavHeader() {
  return std::string("RIFF\x24\x00\x00\x00WAVEfmt ", 16) + std::string(28, '\x01');
}

std::filesystem::path tempFile(const std::string& name, const std::string& bytes) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("parley_parts_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(Sniffing, KnowsTheMagicNumbers) {
  EXPECT_EQ(sniffMimeType(makePng(2, 2)), "image/png");
  EXPECT_EQ(sniffMimeType(jpegHeader(3, 4)), "image/jpeg");
  EXPECT_EQ(sniffMimeType(gifHeader(3, 4)), "image/gif");
  EXPECT_EQ(sniffMimeType(webpVp8xHeader(3, 4)), "image/webp");
  EXPECT_EQ(sniffMimeType("%PDF-1.7\n..."), "application/pdf");
  EXPECT_EQ(sniffMimeType(wavHeader()), "audio/wav");
  EXPECT_EQ(sniffMimeType("ID3\x04\x00rest"), "audio/mpeg");
  EXPECT_EQ(sniffMimeType(std::string("\xFF\xFB\x90\x00", 4)), "audio/mpeg");
  EXPECT_EQ(sniffMimeType("OggS\x00\x02"), "audio/ogg");
  EXPECT_EQ(sniffMimeType("plain notes, été\n"), "text/plain");
  EXPECT_EQ(sniffMimeType(std::string("\x00\x01\x02\x03", 4)), "");
  EXPECT_EQ(sniffMimeType(std::string("ok\xC3", 3)), "");  // a cut UTF-8 sequence
}

TEST(ImageHeaders, SizesFromEachFormat) {
  EXPECT_EQ(imageSize(makePng(640, 480)), (ImageSize{640, 480}));
  EXPECT_EQ(imageSize(jpegHeader(1024, 768)), (ImageSize{1024, 768}));
  EXPECT_EQ(imageSize(gifHeader(31, 17)), (ImageSize{31, 17}));
  EXPECT_EQ(imageSize(webpVp8xHeader(4000, 3000)), (ImageSize{4000, 3000}));
  EXPECT_FALSE(imageSize(makePng(5, 5).substr(0, 20)));  // cut inside IHDR
  EXPECT_FALSE(imageSize("%PDF-1.7"));
  EXPECT_FALSE(imageSize(std::string("\xFF\xD8\xFF\xE0\x00\x10", 6)));  // no frame header
}

TEST(ImageTokens, OpenAiPublishedExamples) {
  EXPECT_EQ(imageTokens({1024, 1024}, ImageDetail::High, ImageTokenRule::OpenAiTiles), 765);
  EXPECT_EQ(imageTokens({2048, 4096}, ImageDetail::High, ImageTokenRule::OpenAiTiles), 1105);
  EXPECT_EQ(imageTokens({4096, 8192}, ImageDetail::Low, ImageTokenRule::OpenAiTiles), 85);
  EXPECT_EQ(imageTokens({512, 512}, ImageDetail::Auto, ImageTokenRule::OpenAiTiles), 255);
}

TEST(ImageTokens, AnthropicPixelRule) {
  // Anthropic's table: 200x200 ~54, 1000x1000 ~1334, 1092x1092 ~1590.
  EXPECT_EQ(imageTokens({200, 200}, ImageDetail::Auto, ImageTokenRule::AnthropicPixels), 54);
  EXPECT_EQ(imageTokens({1000, 1000}, ImageDetail::Auto, ImageTokenRule::AnthropicPixels), 1334);
  EXPECT_EQ(imageTokens({1092, 1092}, ImageDetail::Auto, ImageTokenRule::AnthropicPixels), 1590);
  // Larger images are scaled down first: never much above 1600.
  EXPECT_LE(imageTokens({5000, 5000}, ImageDetail::Auto, ImageTokenRule::AnthropicPixels), 1600);
}

// The blob table's key: FIPS 180-4's examples, and lengths around the padding's block edges.
TEST(BlobKeys, Sha256OfThePublishedExamples) {
  using detail::sha256Hex;
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256Hex(std::string(1'000'000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(sha256Hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256Hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Parts, MessageKeepsTheChatFormAndReadsItBack) {
  const std::string png = makePng(1024, 1024);
  const Message m =
      Message::user({Part::text("What is this? "), Part::imageBytes(png, "", ImageDetail::High),
                     Part::imageUrl("https://example.test/cat.jpg", ImageDetail::Low),
                     Part::audioBytes(wavHeader()), Part::fileBytes("%PDF-1.4 x", "report.pdf")});
  EXPECT_EQ(m.content, "What is this? ");
  ASSERT_TRUE(hasParts(m));
  const json& content = m.extra["content"];
  EXPECT_EQ(content[1]["image_url"]["url"], "data:image/png;base64," + base64Encode(png));
  EXPECT_EQ(content[1]["image_url"]["detail"], "high");
  EXPECT_EQ(content[3]["input_audio"]["format"], "wav");
  EXPECT_EQ(content[4]["file"]["filename"], "report.pdf");

  const std::vector<Part> parts = partsOf(m);
  ASSERT_EQ(parts.size(), 5u);
  EXPECT_EQ(parts[0], Part::text("What is this? "));
  EXPECT_EQ(parts[1].bytes, png);
  EXPECT_EQ(parts[1].mimeType, "image/png");
  EXPECT_EQ(parts[2].url, "https://example.test/cat.jpg");
  EXPECT_EQ(parts[2].detail, ImageDetail::Low);
  EXPECT_EQ(parts[3].kind, PartKind::Audio);
  EXPECT_EQ(parts[3].bytes, wavHeader());
  EXPECT_EQ(parts[4].mimeType, "application/pdf");

  // The JSON round trip (what the stores keep) gives the same message.
  EXPECT_EQ(messageFromJson(toJson(m)), m);
}

TEST(Parts, OldOpaqueContentLoadsTheSame) {
  const json old = json::parse(
      R"({"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x.test/a.png"}}]})");
  const Message m = messageFromJson(old);
  EXPECT_EQ(toJson(m), old);
  const auto parts = partsOf(m);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].url, "https://x.test/a.png");
  // A part type parley does not know is kept verbatim, and named when read as parts.
  const Message odd = messageFromJson(
      json::parse(R"({"role":"user","content":[{"type":"video_url","video_url":"v"}]})"));
  try {
    partsOf(odd);
    FAIL() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "message.content[0].type");
  }
}

TEST(Parts, BytesThatAreNotWhatTheySayAreRefused) {
  EXPECT_THROW(Part::imageBytes("%PDF-1.4"), ValidationError);
  EXPECT_THROW(Part::audioBytes(makePng(1, 1)), ValidationError);
  EXPECT_EQ(Part::attachment(makePng(1, 1), "a.png").kind, PartKind::Image);
  EXPECT_EQ(Part::attachment(wavHeader(), "a.wav").kind, PartKind::Audio);
  const Part notes = Part::attachment("notes", "notes.txt");
  EXPECT_EQ(notes.kind, PartKind::File);
  EXPECT_EQ(notes.mimeType, "text/plain");
  EXPECT_THROW(Message::user(std::vector<Part>{}), ValidationError);
}

TEST(Parts, CapsArePerPartPerMessageAndOnCount) {
  PartLimits limits;
  limits.maxPartBytes = 1000;
  limits.maxMessageBytes = 1500;
  limits.maxParts = 3;
  const auto path = tempFile("big.pdf", "%PDF-" + std::string(1001, 'x'));
  try {
    Part::file(path, limits);
    FAIL() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), path.string());
    EXPECT_NE(std::string(e.reason()).find("is 1006 bytes, over the cap of 1000 bytes"),
              std::string::npos)
        << e.reason();
  }
  EXPECT_NO_THROW(Part::fileBytes(std::string(1000, 'x'), "ok.txt", "", limits));
  EXPECT_THROW(Part::fileBytes(std::string(1001, 'x'), "no.txt", "", limits), ValidationError);
  const Part half = Part::fileBytes(std::string(800, 'x'), "half.txt", "", limits);
  try {
    Message::user({half, half}, limits);
    FAIL() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "half.txt");
    EXPECT_NE(std::string(e.reason()).find("per message"), std::string::npos) << e.reason();
  }
  EXPECT_THROW(
      Message::user({Part::text("a"), Part::text("b"), Part::text("c"), Part::text("d")}, limits),
      ValidationError);
  EXPECT_NO_THROW(Message::user({Part::text("a"), Part::text("b"), Part::text("c")}, limits));
  EXPECT_THROW(Part::imageFile(tempFile("missing-dir", "") / "none.png"), ValidationError);
}

TEST(Parts, TokenCountsIncludeImages) {
  const TokenCounter counter;
  const Message text = Message::user("look");
  const Message withImage =
      Message::user({Part::text("look"), Part::imageBytes(makePng(1024, 1024))});
  const auto base = countMessageTokens(text, counter);
  const auto both = countMessageTokens(withImage, counter);
  EXPECT_EQ(both.tokens - base.tokens, 765);
  EXPECT_EQ(both.estimate, base.estimate);
  const Message low = Message::user(
      {Part::text("look"), Part::imageBytes(makePng(4096, 2048), "", ImageDetail::Low)});
  EXPECT_EQ(countMessageTokens(low, counter).tokens - base.tokens, 85);

  TokenCounter anthropic;
  anthropic.setImageRule(ImageTokenRule::AnthropicPixels);
  EXPECT_EQ(
      countMessageTokens(withImage, anthropic).tokens - countMessageTokens(text, anthropic).tokens,
      1399);  // ceil(1024 * 1024 / 750)
  // An image by URL has no size to read: counted as 1024x1024, and marked an estimate.
  const Message byUrl = Message::user({Part::text("look"), Part::imageUrl("https://x.test/a.png")});
  const auto url = countMessageTokens(byUrl, counter);
  EXPECT_EQ(url.tokens - base.tokens, 765);
  EXPECT_TRUE(url.estimate);
  EXPECT_EQ(countChatTokens({withImage}, json(), counter).tokens,
            countChatTokens({text}, json(), counter).tokens + 765);
}

// --- the request writers -----------------------------------------------------------------------

ChatRequest requestWith(std::vector<Message> messages) {
  ChatRequest r;
  r.model = "m";
  r.messages = std::move(messages);
  return r;
}

ClientOptions endpointFor(Protocol protocol) {
  ClientOptions o;
  o.protocol = protocol;
  o.baseUrl = "https://example.test/v1";
  return o;
}

Message pictureAndPdf() {
  return Message::user({Part::text("Compare"), Part::imageBytes(makePng(2, 3)),
                        Part::imageUrl("https://x.test/b.png", ImageDetail::Low),
                        Part::fileBytes("%PDF-1.4 body", "spec.pdf")});
}

TEST(PartWriters, ChatCompletionsCarriesTheFormVerbatim) {
  const Message m = pictureAndPdf();
  const json body = json::parse(
      detail::buildRequestBody(requestWith({m}), endpointFor(Protocol::OpenAiChat), false));
  EXPECT_EQ(body["messages"][0]["content"], m.extra["content"]);
  const Message audio = Message::user({Part::text("hear"), Part::audioBytes(wavHeader())});
  const json withAudio = json::parse(
      detail::buildRequestBody(requestWith({audio}), endpointFor(Protocol::OpenAiChat), false));
  EXPECT_EQ(withAudio["messages"][0]["content"][1]["type"], "input_audio");
  EXPECT_EQ(withAudio["messages"][0]["content"][1]["input_audio"]["data"],
            base64Encode(wavHeader()));
}

TEST(PartWriters, ResponsesInputImageAndFile) {
  const std::string png = makePng(2, 3);
  const json body = json::parse(detail::buildResponsesBody(
      requestWith({pictureAndPdf()}), endpointFor(Protocol::OpenAiResponses), false));
  const json& content = body["input"][0]["content"];
  ASSERT_EQ(content.size(), 4u) << body.dump();
  EXPECT_EQ(content[0], json({{"type", "input_text"}, {"text", "Compare"}}));
  EXPECT_EQ(content[1]["type"], "input_image");
  EXPECT_EQ(content[1]["image_url"], "data:image/png;base64," + base64Encode(png));
  EXPECT_EQ(content[1]["detail"], "auto");
  EXPECT_EQ(content[2]["image_url"], "https://x.test/b.png");
  EXPECT_EQ(content[2]["detail"], "low");
  EXPECT_EQ(content[3]["type"], "input_file");
  EXPECT_EQ(content[3]["filename"], "spec.pdf");
  EXPECT_EQ(content[3]["file_data"],
            "data:application/pdf;base64," + base64Encode("%PDF-1.4 body"));
}

TEST(PartWriters, AnthropicImageAndDocumentBlocks) {
  const std::string png = makePng(2, 3);
  const Message notes =
      Message::user({Part::text("and"), Part::fileBytes("some notes", "notes.txt")});
  const json body = json::parse(
      detail::buildAnthropicBody(requestWith({pictureAndPdf(), Message::assistant("ok"), notes}),
                                 endpointFor(Protocol::Anthropic), false));
  const json& content = body["messages"][0]["content"];
  ASSERT_EQ(content.size(), 4u) << body.dump();
  EXPECT_EQ(content[0]["text"], "Compare");
  EXPECT_EQ(
      content[1],
      json::parse(R"({"type":"image","source":{"type":"base64","media_type":"image/png","data":")" +
                  base64Encode(png) + R"("}})"));
  EXPECT_EQ(content[2]["source"], json({{"type", "url"}, {"url", "https://x.test/b.png"}}));
  EXPECT_EQ(content[3]["type"], "document");
  EXPECT_EQ(content[3]["source"]["media_type"], "application/pdf");
  EXPECT_EQ(content[3]["title"], "spec.pdf");
  const json& text = body["messages"][2]["content"][1];
  EXPECT_EQ(text["source"],
            json({{"type", "text"}, {"media_type", "text/plain"}, {"data", "some notes"}}));
}

TEST(PartWriters, PartsAProtocolCannotCarryAreRefusedByName) {
  const Message audio = Message::user({Part::text("hear"), Part::audioBytes(wavHeader())});
  for (Protocol protocol : {Protocol::OpenAiResponses, Protocol::Anthropic}) {
    try {
      if (protocol == Protocol::Anthropic) {
        detail::buildAnthropicBody(
            requestWith({Message::user("x"), Message::assistant("y"), audio}),
            endpointFor(protocol), false);
      } else {
        detail::buildResponsesBody(
            requestWith({Message::user("x"), Message::assistant("y"), audio}),
            endpointFor(protocol), false);
      }
      FAIL() << "no error";
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.field(), "request.messages[2].content[1]");
      EXPECT_NE(std::string(e.reason()).find("audio"), std::string::npos);
    }
  }
  const Message zip = Message::user({Part::fileBytes("PK\x03\x04zip", "a.zip")});
  EXPECT_THROW(
      detail::buildAnthropicBody(requestWith({zip}), endpointFor(Protocol::Anthropic), false),
      ValidationError);
}

TEST(PartWriters, BodiesAreByteStable) {
  for (Protocol protocol : {Protocol::OpenAiChat, Protocol::OpenAiResponses, Protocol::Anthropic}) {
    ChatRequest plain = requestWith({pictureAndPdf()});
    ChatRequest encoded = requestWith({});
    encoded.encodedMessages.push_back(
        std::make_shared<const std::string>(encodeMessage(pictureAndPdf())));
    auto build = [&](const ChatRequest& r) {
      switch (protocol) {
        case Protocol::Anthropic:
          return detail::buildAnthropicBody(r, endpointFor(protocol), true);
        case Protocol::OpenAiResponses:
          return detail::buildResponsesBody(r, endpointFor(protocol), true);
        default:
          return detail::buildRequestBody(r, endpointFor(protocol), true);
      }
    };
    EXPECT_EQ(build(plain), build(plain));
    EXPECT_EQ(build(plain), build(encoded));
  }
}

}  // namespace
}  // namespace parley
