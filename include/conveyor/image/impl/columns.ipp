// conveyor/image/impl/columns.ipp — columns, their stacking, and the collate_fields stage
// (see columns.hpp).
#ifndef CONVEYOR_IMAGE_IMPL_COLUMNS_IPP
#define CONVEYOR_IMAGE_IMPL_COLUMNS_IPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/detail/offload.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stream.hpp>
#include <conveyor/image/columns.hpp>
#include <conveyor/image/error.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

namespace conveyor::image {

CONVEYOR_DECL std::size_t stacked_tensor::elements() const noexcept
{
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
}

CONVEYOR_DECL std::optional<dtype> stacked_tensor::type() const noexcept
{
    if (descr.size() != 3) return std::nullopt;
    constexpr char native = std::endian::native == std::endian::little ? '<' : '>';
    const char order = descr[0];
    const std::string_view rest = std::string_view(descr).substr(1);
    if (rest == "u1" && (order == '|' || order == '<' || order == '>' || order == '=')) return dtype::uint8;
    if (order != native && order != '=') return std::nullopt;
    if (rest == "i8") return dtype::int64;
    if (rest == "f2") return dtype::float16;
    if (rest == "f4") return dtype::float32;
    return std::nullopt;
}

CONVEYOR_DECL const batch_column* sample_batch::column(std::string_view name) const noexcept
{
    for (const auto& c : columns)
        if (c.name == name) return &c;
    return nullptr;
}

namespace detail {

/// `bytes` of memory of its own for a stacked tensor (at least one byte, so that an empty
/// tensor has an address).
inline std::shared_ptr<void> column_memory(std::size_t bytes)
{
    const std::size_t n = std::max<std::size_t>(bytes, 1);
    return std::shared_ptr<void>(conveyor::detail::allocate_bytes(n), [n](void* p) { conveyor::detail::deallocate_bytes(p, n); });
}

/// C-order strides (in elements) of `shape`, or, with `fortran`, Fortran order within
/// each item (the first dimension, the items, outermost either way).
inline std::vector<std::int64_t> strides_of(const std::vector<std::int64_t>& shape, bool fortran)
{
    std::vector<std::int64_t> s(shape.size(), 1);
    if (shape.empty()) return s;
    if (!fortran) {
        for (std::size_t i = shape.size() - 1; i > 0; --i) s[i - 1] = s[i] * shape[i];
        return s;
    }
    std::int64_t step = 1;
    for (std::size_t i = 1; i < shape.size(); ++i) {
        s[i] = step;
        step *= shape[i];
    }
    s[0] = step;
    return s;
}

/// `values` stacked when they are all `V` and `same(first, each)`; `part(v)` is a value's
/// bytes, which all have the same length.
template <class V, class Same, class Part>
std::optional<std::pair<std::shared_ptr<void>, std::size_t>> stack_all(const std::vector<field_value>& values, Same same, Part part)
{
    const V* first = std::get_if<V>(&values.front());
    if (!first) return std::nullopt;
    for (const auto& v : values) {
        const V* x = std::get_if<V>(&v);
        if (!x || !same(*first, *x)) return std::nullopt;
    }
    const std::size_t each = part(*first).size();
    auto memory = column_memory(each * values.size());
    auto* out = static_cast<std::byte*>(memory.get());
    for (std::size_t i = 0; i < values.size(); ++i) {
        const std::span<const std::byte> p = part(*std::get_if<V>(&values[i]));
        if (!p.empty()) std::memcpy(out + i * each, p.data(), each);
    }
    return std::pair{std::move(memory), each};
}

} // namespace detail

CONVEYOR_DECL batch_column collate_column(std::string name, std::vector<field_value> values)
{
    batch_column c{.name = std::move(name), .stacked = std::nullopt, .values = {}};
    const auto n = static_cast<std::int64_t>(values.size());
    if (values.empty()) return c;
    constexpr char native = std::endian::native == std::endian::little ? '<' : '>';
    stacked_tensor t;
    if (auto s = detail::stack_all<std::int64_t>(
            values, [](auto, auto) { return true; },
            [](const std::int64_t& v) { return std::as_bytes(std::span(&v, 1)); })) {
        t.descr = std::string(1, native) + "i8";
        t.item_size = sizeof(std::int64_t);
        t.shape = {n};
        t.data = s->first.get();
        t.owner = std::move(s->first);
    } else if (auto s = detail::stack_all<array_value>(
                   values,
                   [](const array_value& a, const array_value& b) {
                       return a.descr == b.descr && a.shape == b.shape && a.fortran_order == b.fortran_order;
                   },
                   [](const array_value& a) { return a.data.span(); })) {
        const array_value& first = *std::get_if<array_value>(&values.front());
        t.descr = first.descr;
        t.item_size = first.item_size();
        t.shape = {n};
        t.shape.insert(t.shape.end(), first.shape.begin(), first.shape.end());
        t.strides = detail::strides_of(t.shape, first.fortran_order);
        t.data = s->first.get();
        t.owner = std::move(s->first);
    } else if (auto s = detail::stack_all<decoded_image>(
                   values,
                   [](const decoded_image& a, const decoded_image& b) {
                       return a.height == b.height && a.width == b.width && a.channels == b.channels;
                   },
                   [](const decoded_image& i) { return std::as_bytes(i.data()); })) {
        const decoded_image& first = *std::get_if<decoded_image>(&values.front());
        t.descr = "|u1";
        t.item_size = 1;
        t.shape = {n, first.height, first.width, first.channels};
        t.data = s->first.get();
        t.owner = std::move(s->first);
    } else {
        c.values = std::move(values);
        return c;
    }
    if (t.strides.empty()) t.strides = detail::strides_of(t.shape, false);
    c.stacked = std::move(t);
    return c;
}

namespace detail {

CONVEYOR_DECL field_value take_value(decoded_sample& s, std::string_view spec)
{
    for (std::string_view name : alternatives(spec)) {
        if (name == "__key__") return s.key;
        if (name == "__url__") return s.origin;
        if (field_value* v = s.find(name)) return std::move(*v);
    }
    std::vector<std::string_view> have;
    for (const auto& f : s.fields) have.push_back(f.name);
    throw missing_field_error(spec, s.key, s.origin, have);
}

CONVEYOR_DECL std::vector<batch_column> columns_of(std::span<const std::string> names, std::vector<std::vector<field_value>> rows)
{
    std::vector<batch_column> out;
    out.reserve(names.size());
    for (std::size_t j = 0; j < names.size(); ++j) {
        std::vector<field_value> values;
        values.reserve(rows.size());
        for (auto& row : rows) values.push_back(j < row.size() ? std::move(row[j]) : field_value{});
        out.push_back(collate_column(names[j], std::move(values)));
    }
    return out;
}

/// The batch being collected by a run of `collate_fields`.
struct fields_batch {
    std::vector<std::string> keys;
    std::vector<conveyor::sample_id> ids;
    std::vector<std::vector<field_value>> rows;
};

inline asio::awaitable<bool> send_fields_batch(run_context& ctx, sink<sample_batch>& out, fields_batch& b,
                                                const std::vector<std::string>& names, std::uint64_t index)
{
    fields_batch taken = std::move(b);
    b = {};
    sample_batch batch = co_await conveyor::detail::offload(ctx.rt().compute_executor(), [&] {
        sample_batch s;
        s.columns = columns_of(names, std::move(taken.rows));
        s.keys = std::move(taken.keys);
        s.ids = std::move(taken.ids);
        s.index = index;
        return s;
    });
    co_return co_await out.send(std::move(batch));
}

inline asio::awaitable<void> collate_fields_run(run_context& ctx, stream<decoded_sample> in, std::size_t n,
                                                std::shared_ptr<const collate_fields_options> o, sink<sample_batch>& out)
{
    std::vector<std::string> names = o->fields;
    fields_batch b;
    std::uint64_t index = 0;
    std::vector<decoded_sample> got;
    while (co_await in.async_next_batch(got, n - b.rows.size())) {
        for (auto& s : got) {
            if (names.empty())
                for (const auto& f : s.fields) names.push_back(f.name); // the run's first sample names the columns
            std::vector<field_value> row;
            row.reserve(names.size());
            try {
                for (const auto& spec : names) row.push_back(take_value(s, spec));
            } catch (...) {
                if (o->errors == on_error::fail || ctx.stopping()) {
                    ctx.fail(std::current_exception(), "collate_fields", s.key);
                    co_return;
                }
                ctx.note_skip(conveyor::detail::skip_line("collate_fields", s.key, std::current_exception()));
                continue;
            }
            b.keys.push_back(std::move(s.key));
            b.ids.push_back(s.id);
            b.rows.push_back(std::move(row));
            if (b.rows.size() == n && !co_await send_fields_batch(ctx, out, b, names, index++)) {
                in.close();
                co_return;
            }
        }
        got.clear();
    }
    if (!b.rows.empty() && o->partial && !ctx.stopping()) co_await send_fields_batch(ctx, out, b, names, index);
}

} // namespace detail

CONVEYOR_DECL collate_fields_stage::collate_fields_stage(std::size_t n, collate_fields_options o) : n_(n)
{
    auto bad = [](std::string detail) {
        return conveyor::error(make_error_code(errc::bad_options), {.stage = "collate_fields", .detail = std::move(detail)});
    };
    if (n == 0) throw bad("the batch size must be at least 1");
    for (const auto& f : o.fields)
        if (std::string why = detail::spec_problem(f); !why.empty()) throw bad(why);
    o_ = std::make_shared<const collate_fields_options>(std::move(o));
}

CONVEYOR_DECL stream<sample_batch> collate_fields_stage::operator()(const std::shared_ptr<run_context>& ctx, stream<decoded_sample> in) const
{
    return make_stream<sample_batch>(ctx, "collate_fields", o_->capacity,
                                     [ctx = ctx.get(), in, n = n_, o = o_](sink<sample_batch>& out) mutable -> asio::awaitable<void> {
                                         return detail::collate_fields_run(*ctx, std::move(in), n, o, out);
                                     });
}

} // namespace conveyor::image

#endif
