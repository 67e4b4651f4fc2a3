// conveyor/shard/detail/impl/gunzip.ipp — streaming gzip decompression with zlib.
#ifndef CONVEYOR_SHARD_DETAIL_IMPL_GUNZIP_IPP
#define CONVEYOR_SHARD_DETAIL_IMPL_GUNZIP_IPP

#include <conveyor/shard/detail/gunzip.hpp>

#include <conveyor/shard/error.hpp>

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <new>
#include <utility>

namespace conveyor::shard::detail {

struct gunzip::state {
    // Between members (or before the first): the next byte starts a member, or is zero
    // padding; after padding only more padding may come.
    enum class phase { member, between, padding };

    state(std::string u, std::size_t n, buffer_pool& p) : url(std::move(u)), out_size(std::max<std::size_t>(n, 1)), pool(p) {}

    std::string url;
    std::size_t out_size;
    buffer_pool& pool;
    z_stream zs{};
    std::deque<chunk> in;
    std::size_t in_off = 0;
    bool started = false;
    std::uint64_t consumed = 0;       // absolute compressed offset of the next byte to inflate
    std::uint64_t member_start = 0;   // compressed offset where the current member began
    buffer out;
    std::size_t out_fill = 0;
    std::uint64_t inflated = 0;       // uncompressed offset of the next byte out
    std::uint64_t members = 0;
    phase ph = phase::between;
    bool finished = false;
    bool done = false;

    [[noreturn]] void fail(errc code, std::string what)
    {
        done = true;
        in.clear();
        out = buffer();
        throw shard_error(code, url, inflated,
                          what + " (compressed byte " + std::to_string(consumed) + ", gzip member " + std::to_string(members) +
                              " from compressed byte " + std::to_string(member_start) + "; offsets in the uncompressed stream)");
    }

    chunk take_out()
    {
        out.resize(out_fill);
        chunk c{slice(std::move(out)), inflated - out_fill};
        out = buffer();
        out_fill = 0;
        return c;
    }

    void consume(std::size_t n)
    {
        in_off += n;
        consumed += n;
        if (in_off == in.front().bytes.size()) {
            in.pop_front();
            in_off = 0;
        }
    }
};

CONVEYOR_DECL gunzip::gunzip(std::string url, std::size_t out_chunk_size, buffer_pool& pool)
    : s_(std::make_unique<state>(std::move(url), out_chunk_size, pool))
{
    // 16 + 15: a gzip wrapper (not zlib's, not raw deflate) and the largest window.
    if (inflateInit2(&s_->zs, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
}

CONVEYOR_DECL gunzip::~gunzip()
{
    inflateEnd(&s_->zs);
}

CONVEYOR_DECL void gunzip::feed(chunk compressed)
{
    state& s = *s_;
    if (!s.started) {
        s.started = true;
        s.consumed = s.member_start = compressed.offset;
    }
    if (!compressed.bytes.empty() && !s.done) s.in.push_back(std::move(compressed));
}

CONVEYOR_DECL void gunzip::finish()
{
    s_->finished = true;
}

CONVEYOR_DECL bool gunzip::done() const noexcept
{
    return s_->done;
}

CONVEYOR_DECL bool gunzip::has_work() const noexcept
{
    return !s_->done && (!s_->in.empty() || s_->finished);
}

CONVEYOR_DECL std::uint64_t gunzip::inflated() const noexcept
{
    return s_->inflated;
}

CONVEYOR_DECL std::uint64_t gunzip::consumed() const noexcept
{
    return s_->consumed;
}

CONVEYOR_DECL std::uint64_t gunzip::members() const noexcept
{
    return s_->members;
}

CONVEYOR_DECL std::optional<chunk> gunzip::next()
{
    state& s = *s_;
    for (;;) {
        if (s.done) return std::nullopt;
        if (s.out_fill == s.out_size) return s.take_out();
        if (s.in.empty()) {
            if (!s.finished) return std::nullopt;
            if (s.ph == state::phase::member)
                s.fail(errc::truncated_gzip, "the compressed input ends inside a gzip member");
            if (s.members == 0) s.fail(errc::truncated_gzip, "the input holds no gzip member");
            if (s.out_fill > 0) return s.take_out();
            s.done = true;
            return std::nullopt;
        }
        const chunk& f = s.in.front();
        const std::byte* p = f.bytes.data() + s.in_off;
        const std::size_t n = f.bytes.size() - s.in_off;

        if (s.ph != state::phase::member) {
            if (*p == std::byte{0} && s.members > 0) { // padding after a member: skip the run of zeros
                const std::size_t zeros = static_cast<std::size_t>(std::find_if(p, p + n, [](std::byte b) { return b != std::byte{0}; }) - p);
                s.ph = state::phase::padding;
                s.consume(zeros);
                continue;
            }
            if (s.ph == state::phase::padding) s.fail(errc::bad_gzip, "non-zero bytes follow the zero padding after the last gzip member");
            // Another member (gzip -d reads concatenated members as one stream); zlib checks its magic.
            if (inflateReset(&s.zs) != Z_OK) s.fail(errc::bad_gzip, "inflateReset failed");
            s.ph = state::phase::member;
            s.member_start = s.consumed;
            ++s.members;
        }

        if (s.out.capacity() == 0) {
            s.out = s.pool.acquire(s.out_size);
            s.out_fill = 0;
        }
        const std::size_t in_n = std::min<std::size_t>(n, UINT_MAX);
        const std::size_t out_n = std::min<std::size_t>(s.out_size - s.out_fill, UINT_MAX);
        s.zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(p));
        s.zs.avail_in = static_cast<uInt>(in_n);
        s.zs.next_out = reinterpret_cast<Bytef*>(s.out.data() + s.out_fill);
        s.zs.avail_out = static_cast<uInt>(out_n);
        const int r = inflate(&s.zs, Z_NO_FLUSH);
        const std::size_t used = in_n - s.zs.avail_in;
        const std::size_t made = out_n - s.zs.avail_out;
        s.out_fill += made;
        s.inflated += made;
        if (used > 0) s.consume(used);
        if (r == Z_STREAM_END) {
            s.ph = state::phase::between;
            continue;
        }
        if (r == Z_OK) continue;
        if (r == Z_BUF_ERROR && (used > 0 || made > 0)) continue;
        const char* msg = s.zs.msg ? s.zs.msg : (r == Z_MEM_ERROR ? "out of memory" : "inflate made no progress");
        s.fail(errc::bad_gzip, std::string("corrupt gzip data: ") + msg);
    }
}

} // namespace conveyor::shard::detail

#endif
