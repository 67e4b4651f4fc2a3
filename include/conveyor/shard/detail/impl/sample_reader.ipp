// conveyor/shard/detail/impl/sample_reader.ipp — shard bytes to samples.
#ifndef CONVEYOR_SHARD_DETAIL_IMPL_SAMPLE_READER_IPP
#define CONVEYOR_SHARD_DETAIL_IMPL_SAMPLE_READER_IPP

#include <conveyor/shard/detail/sample_reader.hpp>

#include <conveyor/core/detail/ascii.hpp>
#include <conveyor/core/detail/offload.hpp>
#include <conveyor/shard/detail/sample_name.hpp>
#include <conveyor/shard/error.hpp>

#include <algorithm>
#include <utility>

namespace conveyor::shard::detail {

CONVEYOR_DECL bool is_meta_member(std::string_view name) noexcept
{
    const auto slash = name.find('/');
    if (slash == std::string_view::npos) return name.starts_with("__") && name.ends_with("__");
    const std::string_view first = name.substr(0, slash);
    return first.size() >= 4 && first.starts_with("__") && first.ends_with("__");
}

CONVEYOR_DECL sample_grouper::sample_grouper(std::string name, std::uint64_t shard, bool lowercase_fields, std::uint64_t first_index,
                                             std::uint64_t work, std::shared_ptr<const std::string> url)
    : name_(std::move(name)), url_(url ? std::move(url) : std::make_shared<const std::string>(name_)), shard_(shard), work_(work),
      lowercase_(lowercase_fields), next_index_(first_index)
{
}

CONVEYOR_DECL std::optional<sample> sample_grouper::add(tar_member m)
{
    if (is_meta_member(m.name)) {
        ++counts_.meta;
        return std::nullopt;
    }
    const auto split = split_sample_name(m.name);
    if (!split) {
        ++counts_.unkeyed;
        return std::nullopt;
    }
    std::string field_name(split->field);
    if (lowercase_)
        for (char& c : field_name) c = conveyor::detail::ascii_lower(c);
    std::optional<sample> done;
    if (!current_ || current_->key != split->key) {
        done = std::move(current_);
        current_.emplace();
        current_->key = std::string(split->key);
        current_->origin = *url_;
        current_->offset = m.header_offset;
        current_->shard = shard_;
        current_->work = work_;
        current_->index = next_index_++;
        ++counts_.samples;
    } else if (current_->find(field_name)) {
        throw shard_error(errc::duplicate_field, name_, m.header_offset,
                          "sample '" + current_->key + "' has field '" + field_name + "' twice (member '" + m.name +
                              "' at byte " + std::to_string(m.header_offset) + ")");
    }
    current_->fields.push_back(field{std::move(field_name), std::move(m.data), m.data_offset});
    current_->end = m.end_offset; // a resumed read starts here, after this sample
    return done;
}

CONVEYOR_DECL std::optional<sample> sample_grouper::finish()
{
    return std::exchange(current_, std::nullopt);
}

CONVEYOR_DECL sample_parser::sample_parser(std::string url, sample_reader_options o)
    : o_(o), tar_(url, o.tar),
      group_(url, o.shard, o.tar.lowercase_fields, o.first_index, o.work, o.url)
{
    if (!o_.tar.pool) o_.tar.pool = &default_shard_pool();
}

CONVEYOR_DECL void sample_parser::decide(bool at_end)
{
    if (decided_ || (!at_end && undecided_bytes_ < 2)) return;
    std::byte head[2]{};
    std::size_t got = 0;
    for (const auto& c : undecided_)
        for (std::size_t i = 0; i < c.bytes.size() && got < 2; ++i) head[got++] = c.bytes.data()[i];
    decided_ = true;
    if (is_gzip_magic({head, got})) gz_ = std::make_unique<gunzip>(tar_.url(), o_.inflate_chunk_size, *o_.tar.pool);
    else if (total_) tar_.set_total_size(*total_);
    for (auto& c : undecided_) {
        if (gz_) gz_->feed(std::move(c));
        else tar_.feed(std::move(c));
    }
    undecided_.clear();
}

CONVEYOR_DECL void sample_parser::set_total_size(std::uint64_t n)
{
    total_ = n;
    if (decided_ && !gz_) tar_.set_total_size(n);
}

CONVEYOR_DECL void sample_parser::feed(chunk c)
{
    if (!decided_) {
        undecided_bytes_ += c.bytes.size();
        undecided_.push_back(std::move(c));
        decide(false);
        return;
    }
    if (gz_) gz_->feed(std::move(c));
    else tar_.feed(std::move(c));
}

CONVEYOR_DECL void sample_parser::finish()
{
    finished_ = true;
    decide(true);
    if (gz_) gz_->finish();
    else {
        tar_.finish();
        tar_finished_ = true;
    }
}

CONVEYOR_DECL bool sample_parser::has_inflate_work() const noexcept
{
    return gz_ && !done_ && inflated_.empty() && !tar_finished_ && gz_->has_work();
}

CONVEYOR_DECL void sample_parser::inflate_some()
{
    if (!gz_) return;
    for (std::size_t i = 0; i < std::max<std::size_t>(o_.inflate_chunks_per_step, 1); ++i) {
        auto c = gz_->next();
        if (!c) break;
        inflated_.push_back(std::move(*c));
    }
}

CONVEYOR_DECL std::optional<sample> sample_parser::next(bool inflate)
{
    for (;;) {
        if (done_) return std::nullopt;
        std::optional<tar_member> m;
        if (!gz_) {
            m = tar_.next();
        } else {
            try {
                m = tar_.next();
            } catch (const conveyor::error& e) {
                // Offsets in a compressed shard are in its uncompressed stream: say so, and
                // how far into the compressed bytes inflating had gone.
                if (e.code().category() != shard_category()) throw;
                throw shard_error(static_cast<errc>(e.code().value()), tar_.url(), static_cast<std::uint64_t>(std::max<std::int64_t>(e.offset(), 0)),
                                  e.ctx().detail + " (gzip-compressed shard: offsets in its uncompressed stream; " +
                                      std::to_string(gz_->consumed()) + " compressed bytes inflated so far)");
            }
        }
        if (m) {
            if (auto s = group_.add(std::move(*m))) return s;
            continue;
        }
        if (tar_.done()) {
            if (auto s = group_.finish()) return s;
            // A compressed shard ends where its gzip stream ends, not at the tar's
            // end-of-archive marker: what follows the marker (a record's zero padding) is
            // inflated and dropped, so that the stream's trailer (CRC-32 and length) is
            // checked and a cut or corrupt end is an error whatever the chunk sizes.
            if (gz_ && !gz_->done()) {
                inflated_.clear();
                if (!inflate) return std::nullopt; // has_inflate_work() says inflate_some is due
                while (gz_->next()) {
                }
                if (!gz_->done()) return std::nullopt; // more compressed input is needed
            }
            done_ = true;
            return std::nullopt;
        }
        // The tar reader needs input.
        if (!gz_ || tar_finished_) return std::nullopt;
        if (!inflated_.empty()) {
            tar_.feed(std::move(inflated_.front()));
            inflated_.pop_front();
            continue;
        }
        if (gz_->done()) {
            tar_.finish();
            tar_finished_ = true;
            continue;
        }
        if (!inflate || !gz_->has_work()) return std::nullopt;
        if (auto c = gz_->next()) {
            tar_.feed(std::move(*c));
            continue;
        }
        if (!gz_->done()) return std::nullopt;
    }
}

CONVEYOR_DECL std::vector<sample> read_samples(slice shard, std::string url, sample_reader_options o)
{
    sample_parser p(std::move(url), o);
    p.set_total_size(shard.size());
    p.feed(chunk{std::move(shard), 0});
    p.finish();
    std::vector<sample> out;
    while (auto s = p.next()) out.push_back(std::move(*s));
    return out;
}

CONVEYOR_DECL std::vector<tar_member> read_members(slice shard, std::string url, tar_options o)
{
    std::vector<tar_member> out;
    std::unique_ptr<gunzip> gz;
    tar_reader tar(url, o);
    if (is_gzip_magic(shard.span())) {
        gz = std::make_unique<gunzip>(url, std::size_t{8} << 20, o.pool ? *o.pool : default_shard_pool());
        gz->feed(chunk{std::move(shard), 0});
        gz->finish();
    } else {
        tar.set_total_size(shard.size());
        tar.feed(chunk{std::move(shard), 0});
        tar.finish();
    }
    for (;;) {
        if (auto m = tar.next()) {
            out.push_back(std::move(*m));
            continue;
        }
        if (tar.done() || !gz) {
            if (gz) // the gzip stream's end is checked too (see sample_parser::next)
                while (gz->next()) {
                }
            break;
        }
        if (auto c = gz->next()) tar.feed(std::move(*c));
        else tar.finish();
    }
    return out;
}

CONVEYOR_DECL memory_chunk_reader::memory_chunk_reader(slice bytes, std::string url, std::size_t chunk_size)
    : bytes_(std::move(bytes)), url_(std::move(url)), chunk_size_(std::max<std::size_t>(chunk_size, 1))
{
}

CONVEYOR_DECL asio::awaitable<std::optional<chunk>> memory_chunk_reader::async_next()
{
    if (at_ >= bytes_.size()) co_return std::nullopt;
    const std::size_t n = std::min(chunk_size_, bytes_.size() - at_);
    chunk c{bytes_.sub(at_, n), at_};
    at_ += n;
    co_return c;
}

/// One step of inflating on the compute pool. A named type, not a closure: a closure's
/// type has no linkage, which a coroutine frame in the compiled library must not hold
/// (-Wsubobject-linkage); and it owns nothing, so GCC 12 destroying it twice is harmless.
struct inflate_step {
    sample_parser* parser;
    void operator()() const { parser->inflate_some(); }
};

/// `o` with the runtime's buffer pool unless it names one.
inline sample_reader_options with_runtime_pool(sample_reader_options o, runtime* rt)
{
    if (!o.tar.pool && rt) o.tar.pool = &rt->buffers();
    return o;
}

CONVEYOR_DECL sample_reader::sample_reader(std::unique_ptr<chunk_reader> in, sample_reader_options o, runtime* rt)
    : in_(std::move(in)), url_(in_->url()), rt_(rt), parser_(url_, with_runtime_pool(o, rt)), deliver_from_(o.deliver_from),
      skip_(std::move(o.skip))
{
}

/// True when sample index `i` is one the reader was told to pass over.
inline bool passed_over(std::uint64_t i, std::uint64_t from, const std::vector<std::uint64_t>& skip, std::size_t& at) noexcept
{
    if (i < from) return true;
    while (at < skip.size() && skip[at] < i) ++at;
    return at < skip.size() && skip[at] == i;
}

CONVEYOR_DECL asio::awaitable<std::optional<sample>> sample_reader::async_next()
{
    const bool offload = rt_ != nullptr;
    for (;;) {
        if (auto s = parser_.next(!offload)) {
            if (passed_over(s->index, deliver_from_, skip_, skip_at_)) continue;
            co_return s;
        }
        if (parser_.done()) co_return std::nullopt;
        if (offload && parser_.has_inflate_work()) {
            co_await conveyor::detail::offload(rt_->compute_executor(), inflate_step{&parser_});
            continue;
        }
        if (eof_)
            throw conveyor::error(conveyor::make_error_code(conveyor::errc::invalid_argument),
                                  {.where = url_, .detail = "shard reader stalled after the end of its input (a bug)"});
        auto c = co_await in_->async_next();
        if (!c) {
            eof_ = true;
            parser_.finish();
            continue;
        }
        if (first_) {
            first_ = false;
            if (in_->size() >= 0) parser_.set_total_size(static_cast<std::uint64_t>(in_->size()));
        }
        parser_.feed(std::move(*c));
    }
}

} // namespace conveyor::shard::detail

#endif
