/** OpenAI's own examples, as the Structured Outputs guide ("Supported schemas") shows them. */
export const openaiExamples = {
  weatherData: {
    type: "object",
    properties: {
      location: { type: "string", description: "The location to get the weather for" },
      unit: {
        type: ["string", "null"],
        description: "The unit to return the temperature in",
        enum: ["F", "C"],
      },
      value: {
        type: "number",
        description: "The actual temperature value in the location",
        minimum: -130,
        maximum: 130,
      },
    },
    additionalProperties: false,
    required: ["location", "unit", "value"],
  },
  mathReasoning: {
    type: "object",
    properties: {
      steps: {
        type: "array",
        items: {
          type: "object",
          properties: { explanation: { type: "string" }, output: { type: "string" } },
          required: ["explanation", "output"],
          additionalProperties: false,
        },
      },
      final_answer: { type: "string" },
    },
    required: ["steps", "final_answer"],
    additionalProperties: false,
  },
  anyOfItem: {
    type: "object",
    properties: {
      item: {
        anyOf: [
          {
            type: "object",
            description: "The user object to insert into the database",
            properties: {
              name: { type: "string", description: "The name of the user" },
              age: { type: "number", description: "The age of the user" },
            },
            additionalProperties: false,
            required: ["name", "age"],
          },
          {
            type: "object",
            description: "The address object to insert into the database",
            properties: {
              number: { type: "string", description: "The number of the address." },
              street: { type: "string", description: "The street name." },
              city: { type: "string", description: "The city of the address" },
            },
            additionalProperties: false,
            required: ["number", "street", "city"],
          },
        ],
      },
    },
    additionalProperties: false,
    required: ["item"],
  },
  definitions: {
    type: "object",
    properties: {
      steps: { type: "array", items: { $ref: "#/$defs/step" } },
      final_answer: { type: "string" },
    },
    $defs: {
      step: {
        type: "object",
        properties: { explanation: { type: "string" }, output: { type: "string" } },
        required: ["explanation", "output"],
        additionalProperties: false,
      },
    },
    required: ["steps", "final_answer"],
    additionalProperties: false,
  },
  ui: {
    type: "object",
    properties: {
      type: {
        type: "string",
        description: "The type of the UI component",
        enum: ["div", "button", "header", "section", "field", "form"],
      },
      label: {
        type: "string",
        description: "The label of the UI component, used for buttons or form fields",
      },
      children: { type: "array", description: "Nested UI components", items: { $ref: "#" } },
      attributes: {
        type: "array",
        description: "Arbitrary attributes for the UI component, suitable for any element",
        items: {
          type: "object",
          properties: {
            name: { type: "string", description: "The name of the attribute" },
            value: { type: "string", description: "The value of the attribute" },
          },
          additionalProperties: false,
          required: ["name", "value"],
        },
      },
    },
    required: ["type", "label", "children", "attributes"],
    additionalProperties: false,
  },
  linkedList: {
    type: "object",
    properties: { linked_list: { $ref: "#/$defs/linked_list_node" } },
    $defs: {
      linked_list_node: {
        type: "object",
        properties: {
          value: { type: "number" },
          next: { anyOf: [{ $ref: "#/$defs/linked_list_node" }, { type: "null" }] },
        },
        additionalProperties: false,
        required: ["next", "value"],
      },
    },
    additionalProperties: false,
    required: ["linked_list"],
  },
};
