#include "http/multipart_form.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fjord::http {
namespace {

using namespace std::string_literals;

struct decoded_part {
    form_part_head head;
    std::string body;
};

// Decodes `body` fed `piece` bytes at a time, reading into an output of `out_size` bytes.
base::result<std::vector<decoded_part>> decode(std::string_view body, std::string_view boundary,
                                               std::size_t piece, std::size_t out_size = 7,
                                               form_limits limits = {}) {
    form_decoder d(boundary, limits);
    std::vector<decoded_part> parts;
    std::string out(out_size, '\0');
    std::size_t fed = 0;
    for (int guard = 0; guard < 1000000; ++guard) {
        auto s = d.next(reinterpret_cast<std::byte*>(out.data()), out.size());
        if (!s) return s.as_failure();
        using ev = form_decoder::event;
        switch (s->what) {
            case ev::need_input: {
                if (fed == body.size()) {
                    if (auto end = d.end_of_input(); !end) return end.as_failure();
                    return parts;
                }
                std::string_view chunk = body.substr(fed, piece);
                fed += d.feed(std::as_bytes(std::span(chunk.data(), chunk.size())));
                break;
            }
            case ev::part_begin: parts.push_back({d.part(), {}}); break;
            case ev::data: parts.back().body.append(out.data(), s->produced); break;
            case ev::part_end: break;
            case ev::done: return parts;
        }
    }
    return base::fail(base::errc::internal, "the decoder made no progress");
}

const std::string simple =
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"key\"\r\n\r\n"
    "foo.txt\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"a b.txt\"\r\n"
    "Content-Type: text/plain\r\n\r\n"
    "line1\r\n--Xy\r\nline2\r\n"
    "--XyZ--\r\n";

TEST(FormDecoder, FieldsAndFileAtEveryFeedSize) {
    for (std::size_t piece : {1, 2, 3, 5, 8, 13, 64, 4096}) {
        auto parts = decode(simple, "XyZ", piece);
        ASSERT_TRUE(parts) << piece << ": " << parts.err().message;
        ASSERT_EQ(parts->size(), 2u);
        EXPECT_EQ((*parts)[0].head.name, "key");
        EXPECT_FALSE((*parts)[0].head.filename);
        EXPECT_EQ((*parts)[0].body, "foo.txt");
        EXPECT_EQ((*parts)[1].head.name, "file");
        EXPECT_EQ((*parts)[1].head.filename.value_or(""), "a b.txt");
        EXPECT_EQ((*parts)[1].head.content_type, "text/plain");
        EXPECT_EQ((*parts)[1].body, "line1\r\n--Xy\r\nline2");
    }
}

TEST(FormDecoder, PreamblePaddingAndEpilogue) {
    std::string body =
        "ignored preamble\r\n--b  \t\r\n"
        "content-disposition: FORM-DATA; NAME=x\r\n\r\n"
        "1\r\n--b--\r\nepilogue --b\r\n";
    auto parts = decode(body, "b", 3);
    ASSERT_TRUE(parts) << parts.err().message;
    ASSERT_EQ(parts->size(), 1u);
    EXPECT_EQ((*parts)[0].head.name, "x");
    EXPECT_EQ((*parts)[0].body, "1");
}

TEST(FormDecoder, EmptyPartsAndEscapedNames) {
    std::string body =
        "--b\r\nContent-Disposition: form-data; name=\"a\\\"q\"\r\n\r\n\r\n"
        "--b\r\nContent-Disposition: form-data; name=\"f\"; filename*=UTF-8''%E2%82%AC.txt;"
        " filename=\"e.txt\"\r\n\r\n\r\n--b--";
    auto parts = decode(body, "b", 1);
    ASSERT_TRUE(parts) << parts.err().message;
    ASSERT_EQ(parts->size(), 2u);
    EXPECT_EQ((*parts)[0].head.name, "a\"q");
    EXPECT_EQ((*parts)[0].body, "");
    EXPECT_EQ((*parts)[1].head.filename.value_or(""), "\xE2\x82\xAC.txt");
    EXPECT_EQ((*parts)[1].body, "");
}

TEST(FormDecoder, LargeFileStreamsThroughTheWindow) {
    std::string file;
    for (int i = 0; i < 300000; ++i) file += static_cast<char>("\r\n-abc"[i % 6]);
    std::string body =
        "--abc\r\nContent-Disposition: form-data; name=file\r\n\r\n" + file + "\r\n--abc--";
    auto parts = decode(body, "abc", 70000, 50000);
    ASSERT_TRUE(parts) << parts.err().message;
    ASSERT_EQ(parts->size(), 1u);
    EXPECT_EQ((*parts)[0].body, file);
}

TEST(FormDecoder, Refusals) {
    auto code = [](std::string_view body, std::size_t piece = 4) {
        auto r = decode(body, "b", piece);
        return r ? base::errc::ok : r.code();
    };
    // The body ends before the closing delimiter, or in the middle of a part's head
    EXPECT_EQ(code("--b\r\nContent-Disposition: form-data; name=a\r\n\r\nvalue"),
              base::errc::bad_request);
    EXPECT_EQ(code("--b\r\nContent-Disposition: form-data; name=a\r\n"), base::errc::bad_request);
    EXPECT_EQ(code("no boundary at all"), base::errc::bad_request);
    // A part without a name, without a disposition, with another disposition type, with a bad line
    EXPECT_EQ(code("--b\r\nContent-Disposition: form-data\r\n\r\nv\r\n--b--"),
              base::errc::bad_request);
    EXPECT_EQ(code("--b\r\nContent-Type: text/plain\r\n\r\nv\r\n--b--"), base::errc::bad_request);
    EXPECT_EQ(code("--b\r\nContent-Disposition: attachment; name=a\r\n\r\nv\r\n--b--"),
              base::errc::bad_request);
    EXPECT_EQ(code("--b\r\nContent-Disposition: form-data; name=a\r\nno colon\r\n\r\nv\r\n--b--"),
              base::errc::bad_request);
    EXPECT_EQ(code("--b\r\nContent-Disposition: form-data; name=\"a\r\n\r\nv\r\n--b--"),
              base::errc::bad_request);
    EXPECT_EQ(code("--b\r\nContent-Disposition: form-data; name=a\r\n folded\r\n\r\nv\r\n--b--"),
              base::errc::bad_request);
    EXPECT_EQ(code("--b\r\nX: a\0b\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--b--"s),
              base::errc::bad_request);
    EXPECT_EQ(code("--bX\r\n"), base::errc::bad_request);  // a boundary line with more after it
    // A part head, or a preamble, past its bound
    std::string big =
        "--b\r\nContent-Disposition: form-data; name=a\r\nX: " + std::string(9000, 'x') +
        "\r\n\r\nv\r\n--b--";
    EXPECT_EQ(code(big, 100), base::errc::header_too_large);
    EXPECT_EQ(code(std::string(20000, 'p') + "\r\n--b--"), base::errc::header_too_large);
}

TEST(FormDecoder, Boundary) {
    EXPECT_EQ(form_boundary("multipart/form-data; boundary=abc").value(), "abc");
    EXPECT_EQ(form_boundary("Multipart/Form-Data;boundary=\"a b:c\"; charset=utf-8").value(),
              "a b:c");
    EXPECT_EQ(form_boundary("application/x-www-form-urlencoded").code(),
              base::errc::precondition_failed);
    EXPECT_EQ(form_boundary("").code(), base::errc::precondition_failed);
    EXPECT_EQ(form_boundary("multipart/form-data").code(), base::errc::invalid_argument);
    EXPECT_EQ(form_boundary("multipart/form-data; boundary=").code(), base::errc::invalid_argument);
    EXPECT_EQ(form_boundary("multipart/form-data; boundary=" + std::string(71, 'a')).code(),
              base::errc::invalid_argument);
    EXPECT_EQ(form_boundary("multipart/form-data; boundary=\"a\r\nb\"").code(),
              base::errc::invalid_argument);
    EXPECT_EQ(form_boundary("multipart/form-data; boundary=\"trailing \"").code(),
              base::errc::invalid_argument);
}

}  // namespace
}  // namespace fjord::http
