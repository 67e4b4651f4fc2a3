// conveyor/image/impl/stage.ipp — the decode_image stage's non-template parts (see stage.hpp).
#ifndef CONVEYOR_IMAGE_IMPL_STAGE_IPP
#define CONVEYOR_IMAGE_IMPL_STAGE_IPP

#include <conveyor/image/stage.hpp>

#include <charconv>
#include <utility>

namespace conveyor::image {

namespace detail {

CONVEYOR_DECL std::int64_t parse_label(std::string_view text, std::string_view field, std::string_view key, std::string_view where)
{
    if (const std::optional<std::int64_t> v = parse_decimal(text)) return *v;
    throw image_error(errc::bad_label, key, where,
                      "field '" + std::string(field) + "' holds \"" + conveyor::detail::printable(text, 40) + "\", not a decimal integer");
}

CONVEYOR_DECL decoded decode_item(const decoder& dec, const decode_image_options& o, const encoded_image& e, std::uint64_t epoch)
{
    decoded d;
    d.image = dec.decode(e.bytes, o.decode, {.key = e.key, .origin = e.origin, .epoch = epoch, .stats = o.stats.get()});
    d.key = std::string(e.key);
    d.origin = std::string(e.origin);
    d.label = e.label;
    d.index = e.index;
    return d;
}

CONVEYOR_DECL void check_extra_fields(const decode_image_options& o, std::string_view stage)
{
    for (const auto& f : o.extra_fields)
        if (std::string why = spec_problem(f); !why.empty())
            throw conveyor::error(make_error_code(errc::bad_options), {.stage = std::string(stage), .detail = "extra_fields: " + why});
    if (std::string why = field_options_problem(o.extra_decode); !why.empty())
        throw conveyor::error(make_error_code(errc::bad_options), {.stage = std::string(stage), .detail = "extra_decode: " + why});
}

CONVEYOR_DECL std::vector<field_value> extra_values(const shard::sample& s, const decode_image_options& o, const decoder& dec,
                                                    std::uint64_t epoch)
{
    std::vector<field_value> out;
    out.reserve(o.extra_fields.size());
    const field_context c{.key = s.key, .origin = s.origin, .epoch = epoch, .image = &o.extra_decode.image, .decoder = &dec,
                          .stats = o.stats.get()};
    for (const auto& spec : o.extra_fields) {
        const shard::field* f = nullptr;
        bool found = false;
        for (std::string_view name : alternatives(spec)) {
            if (name == "__key__") {
                out.emplace_back(s.key);
            } else if (name == "__url__") {
                out.emplace_back(s.origin);
            } else if ((f = s.find(name))) {
                out.push_back(decode_field(*f, c, o.extra_decode));
            } else {
                continue;
            }
            found = true;
            break;
        }
        if (!found) {
            std::vector<std::string_view> have;
            for (const auto& x : s.fields) have.push_back(x.name);
            throw missing_field_error(spec, s.key, s.origin, have);
        }
    }
    return out;
}

CONVEYOR_DECL std::vector<field_value> extra_values(const blob& b, const decode_image_options& o, const decoder& dec, std::uint64_t epoch)
{
    (void)dec;
    (void)epoch;
    std::vector<field_value> out;
    out.reserve(o.extra_fields.size());
    for (const auto& spec : o.extra_fields) {
        bool found = false;
        for (std::string_view name : alternatives(spec)) {
            if (name == "__key__") out.emplace_back(b.key);
            else if (name == "__url__") out.emplace_back(b.origin);
            else if (name == "cls" && b.label >= 0) out.emplace_back(b.label);
            else continue;
            found = true;
            break;
        }
        if (!found) {
            std::vector<std::string_view> have;
            if (b.label >= 0) have.push_back("cls");
            throw missing_field_error(spec, b.key, b.origin, have);
        }
    }
    return out;
}

} // namespace detail

CONVEYOR_DECL encoded_image encoded_image_of(const shard::sample& s, const decode_image_options& o)
{
    const shard::field* img = nullptr;
    for (const auto& name : o.fields)
        if ((img = s.find(name))) break;
    if (!img) {
        std::string names;
        for (const auto& n : o.fields) names += (names.empty() ? "" : ", ") + n;
        std::string has;
        for (const auto& f : s.fields) has += (has.empty() ? "" : ", ") + f.name;
        throw detail::image_error(errc::missing_field, s.key, s.origin,
                                  "none of the image fields (" + names + ") is in the sample, which has: " + (has.empty() ? "no fields" : has));
    }
    encoded_image e{.bytes = img->data.span(), .key = s.key, .origin = s.origin, .index = s.index};
    if (o.label_map.map) {
        e.label = detail::map_label_of(o.label_map, s.key, s.origin, nullptr);
    } else if (!o.label_json.field.empty()) {
        const shard::field* doc = s.find(o.label_json.field);
        if (!doc)
            throw detail::image_error(errc::missing_field, s.key, s.origin, "the label field '" + o.label_json.field + "' is not in the sample");
        e.label = detail::json_label_of(doc->data.view(), o.label_json, s.key, s.origin);
    } else if (!o.label_field.empty()) {
        const shard::field* cls = s.find(o.label_field);
        if (!cls)
            throw detail::image_error(errc::missing_field, s.key, s.origin, "the label field '" + o.label_field + "' is not in the sample");
        e.label = detail::parse_label(cls->data.view(), o.label_field, s.key, s.origin);
    }
    return e;
}

CONVEYOR_DECL encoded_image encoded_image_of(const blob& b, const decode_image_options& o)
{
    encoded_image e{.bytes = b.data.span(), .key = b.key, .origin = b.origin, .label = b.label, .index = b.index};
    if (o.label_map.map) e.label = detail::map_label_of(o.label_map, b.key, b.origin, &b.index);
    return e;
}

CONVEYOR_DECL decode_image_stage::decode_image_stage(decode_image_options o, decoded_queue_options q) : q_(q)
{
    if (!o.stats) o.stats = std::make_shared<decode_stats>();
    if (o.fields.empty())
        throw conveyor::error(make_error_code(errc::bad_options), {.stage = "decode_image", .detail = "no image fields to look for"});
    detail::check_extra_fields(o, "decode_image");
    if (o.label_map.map && o.label_map.by == label_lookup::key_number && !o.label_map.first_number)
        throw conveyor::error(make_error_code(errc::bad_options),
                              {.stage = "decode_image",
                               .detail = "label_lookup::key_number needs label_map_options::first_number: the key number of entry \"0\" "
                                         "(1 for ImageNet's ILSVRC2012_val_00000001, 0 for keys counted from 0)"});
    o_ = std::make_shared<const decode_image_options>(std::move(o));
}

} // namespace conveyor::image

#endif
